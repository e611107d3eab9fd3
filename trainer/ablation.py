"""The paper's Table 4 as data: one reward model per dataset recipe, their CheemsBench figures side by side (pure).

    config = AblationConfig(bench=("open.jsonl", "human.jsonl"), recipes=("human", "ai", "ai-distant"))
    order = plan(config.recipes)                     # "human" first: it also supervises the distant recipes
    rows = table_rows(runs, order)                   # runs: one Run per (recipe, seed), made by the runner
    print(render(rows, subsets_of(config.bench)))

The runner that trains through the training service is `trainer.service.ablation`; `cheems ablation` is the
command. A recipe that could not be trained is a row with its reason, not an error. With several seeds each
figure is the mean over the seeds whose training succeeded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Any

from evaluator.evaluate import subset_name
from evaluator.table import render_text
from trainer.datasets.recipes import DATASET_RECIPES, HUMAN_RECIPE, PAPER_RECIPE, dataset_recipe

# Table 4's rows, in its order: recipe -> the paper's name for it
TABLE4 = {
    HUMAN_RECIPE: "Human subset",
    "ai": "GPT subset",
    "ai-debias": "w/ Length debiasing",
    "ai-distant": "w/ Distant supervision",
    "ai-distant-debias": "w/ All strategies",
    PAPER_RECIPE: "CheemsPreference",
}
RESERVED = ("eval_files", "seed")  # training fields the ablation sets itself
NOTE_WIDTH = 120  # characters of a reason shown in the table (the JSON keeps it whole)


@dataclass(frozen=True)
class AblationConfig:
    """What `cheems ablation` trains and on what it evaluates.

    bench: CheemsBench files, each a subset named by its stem, given to every training as `eval_files`: names of
        files under the training service's bench root (`trainer.service.knobs`).
    recipes: dataset recipes (trainer.datasets.recipes); "human" is trained first whether asked or not when a
        distant recipe needs it as supervisor.
    seeds: training seeds; every recipe is trained once per seed, distant ones supervised by that seed's human model.
    training_recipe: trainer.recipes name; empty = the training service's default.
    overrides: TrainConfig fields for every training (not eval_files or seed, which the ablation sets).
    poll_seconds: how often a running training is asked about; timeout: seconds per training (0 = no limit).
    """

    bench: tuple[str, ...]
    recipes: tuple[str, ...] = tuple(TABLE4)
    seeds: tuple[int, ...] = (0,)
    training_recipe: str = ""
    overrides: Mapping[str, str] = field(default_factory=dict)
    poll_seconds: float = 2.0
    timeout: float = 0.0

    def __post_init__(self) -> None:
        if not self.bench:
            raise ValueError("bench: at least one CheemsBench file")
        if len({subset_name(b) for b in self.bench}) != len(self.bench):
            raise ValueError(f"bench: two files share a stem (subset name): {', '.join(self.bench)}")
        if not self.recipes:
            raise ValueError(f"recipes: at least one of {', '.join(DATASET_RECIPES)}")
        for name in self.recipes:
            dataset_recipe(name)  # UnknownDatasetRecipe names the known ones
        if not self.seeds or len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError(f"seeds: distinct integers >= 0, got {list(self.seeds)}")
        reserved = sorted(set(self.overrides) & set(RESERVED))
        if reserved:
            raise ValueError(f"overrides: {', '.join(reserved)} is set by the ablation (--bench, --seeds)")
        if not self.poll_seconds > 0 or not self.timeout >= 0:
            raise ValueError(f"poll_seconds must be > 0 and timeout >= 0, got {self.poll_seconds}, {self.timeout}")


def plan(recipes: Sequence[str]) -> tuple[str, ...]:
    """The recipes in training order, each once: "human" first when asked or when a distant recipe needs it."""
    unique = tuple(dict.fromkeys(recipes))
    needed = HUMAN_RECIPE in unique or any(dataset_recipe(r).needs_scores for r in unique)
    return ((HUMAN_RECIPE,) if needed else ()) + tuple(r for r in unique if r != HUMAN_RECIPE)


def subsets_of(bench: Sequence[str]) -> list[str]:
    return [subset_name(b) for b in bench]


@dataclass(frozen=True)
class Score:
    accuracy: float
    exact_match: float


@dataclass(frozen=True)
class Run:
    """One recipe trained with one seed: its dataset, training, model and figures, or why there are none."""

    recipe: str
    seed: int
    dataset_id: str = ""
    pairs: int | None = None
    supervisor: str = ""  # the model that filtered the AI relations (distant recipes)
    training_id: str = ""
    model_id: str = ""
    overall: float | None = None
    subsets: Mapping[str, Score] = field(default_factory=dict)  # empty when the figures could not be read
    error: str = ""  # why it has no model; empty when it has one
    note: str = ""  # a remark on a run that has a model (e.g. the per-subset figures were not readable)

    @property
    def ok(self) -> bool:
        return not self.error and self.overall is not None


@dataclass(frozen=True)
class Row:
    recipe: str
    paper_row: str  # Table 4's name for it ("" for a recipe Table 4 has no row for)
    seeds: tuple[int, ...]  # the seeds whose figures it averages
    pairs: int | None
    overall: float | None
    subsets: Mapping[str, Score]
    note: str  # why figures are missing (some or all seeds)


def short(reason: str) -> str:
    """A reason in one line: a multi-line one (a failed run's log) as its first and last lines."""
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    text = lines[0] if len(lines) < 2 else f"{lines[0].rstrip(':')} ... {lines[-1]}"
    return text if len(text) <= NOTE_WIDTH else text[: NOTE_WIDTH - 3] + "..."


def table_rows(runs: Sequence[Run], order: Sequence[str]) -> list[Row]:
    """One row per recipe of `order`: the mean over its successful seeds, and why the others failed."""
    rows = []
    for recipe in order:
        mine = [r for r in runs if r.recipe == recipe]
        good = [r for r in mine if r.ok]
        notes = [f"seed {r.seed}: {short(r.error)}" if len(mine) > 1 else short(r.error) for r in mine if not r.ok]
        notes += [short(r.note) for r in good if r.note]
        names = [n for n in (good[0].subsets if good else {}) if all(n in r.subsets for r in good)]
        pairs = [r.pairs for r in mine if r.pairs is not None]
        rows.append(
            Row(
                recipe,
                TABLE4.get(recipe, ""),
                tuple(r.seed for r in good),
                round(fmean(pairs)) if pairs else None,
                fmean(r.overall for r in good if r.overall is not None) if good else None,
                {
                    n: Score(*(fmean(getattr(r.subsets[n], f) for r in good) for f in ("accuracy", "exact_match")))
                    for n in names
                },
                "; ".join(notes),
            )
        )
    return rows


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def render(rows: Sequence[Row], subsets: Sequence[str]) -> str:
    """The table as text: recipe, Table 4's row, seeds, pairs, Overall, each subset's Acc. and Exact., note."""
    header = ["Recipe", "Table 4", "Seeds", "Pairs", "Overall"]
    header += [f"{s} {m}" for s in subsets for m in ("Acc.", "Exact.")] + ["Note"]
    cells = []
    for row in rows:
        figures = [row.subsets.get(s) for s in subsets]
        cells.append(
            [row.recipe, row.paper_row or "-", ",".join(map(str, row.seeds)) or "-"]
            + ["-" if row.pairs is None else str(row.pairs), _fmt(row.overall)]
            + [_fmt(getattr(f, m) if f else None) for f in figures for m in ("accuracy", "exact_match")]
            + [row.note]
        )
    return render_text(header, cells)


def to_json(config: AblationConfig, rows: Sequence[Row], runs: Sequence[Run]) -> dict[str, Any]:
    """The JSON `--json` writes: what was asked, the table's rows, and every run with its ids and whole reasons."""
    return {
        "bench": list(config.bench),
        "subsets": subsets_of(config.bench),
        "seeds": list(config.seeds),
        "training_recipe": config.training_recipe,
        "overrides": dict(config.overrides),
        "rows": [{**asdict(r), "seeds": list(r.seeds)} for r in rows],
        "runs": [asdict(r) for r in runs],
    }


def chart_series(rows: Sequence[Row], subsets: Sequence[str]) -> dict[str, list[float | None]]:
    """{figure name: one value per row} for the chart: Overall, then each subset's Acc. and Exact."""
    series: dict[str, list[float | None]] = {"Overall": [r.overall for r in rows]}
    for s in subsets:
        for label, metric in (("Acc.", "accuracy"), ("Exact.", "exact_match")):
            series[f"{s} {label}"] = [getattr(r.subsets[s], metric) if s in r.subsets else None for r in rows]
    return series
