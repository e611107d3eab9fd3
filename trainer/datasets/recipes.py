"""Dataset recipes: which annotations of each prompt become training pairs, and how (pure, no I/O).

    recipe = dataset_recipe("human+ai-distant-debias")
    items, stats = preference_pairs(prompts, recipe, scores={"<prompt id>": {"r1": 0.3, ...}})

A recipe names its sources, those with AI annotations optionally followed by "-debias" (paper section 4.2):
- "human": each prompt's human annotations resolved with Algorithm 1;
- "ai": its AI annotations resolved the same way;
- "ai-distant": its AI annotations filtered by distant supervision first (the relations the supervisor, an
  RM trained on human rankings only, clearly contradicts are dropped), then resolved;
- "human+ai-distant": the human ranking where a prompt has human annotations, the distant-supervised AI
  ranking where it has only AI ones. Human judgments are the more reliable; mixing both into one graph
  would only turn their disagreements into merged nodes.
- "-debias": the pairs ranked from AI annotations are length-debiased (the pairs whose chosen response is
  longer balanced against those where it is shorter, `services.annotation.algorithm.distant.length_debias`);
  the human pairs enter untouched, as in the paper, which debiases the AI-annotated subset and then adds the
  human one. So there is no "human-debias". "human+ai-distant-debias" is the paper's CheemsPreference
  (PAPER_RECIPE), the default of the training service and of `cheems up`.
Distant supervision's judgement of a relation is set by `DistantSettings` (the paper gives no numbers; the
defaults and why are in its docstring), recorded with every dataset.
Responses any annotator discarded are left out of every relation. Each ranking gives every pair of
responses with different ranks.
The I/O around this (the store, the supervisor model, the file, the events) is `trainer.datasets.build`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cheems.errors import InvalidInput
from cheems.formats.preference import PreferenceItem
from cheems.formats.responses import Response
from services.annotation.algorithm.distant import distant_supervision, length_debias
from services.annotation.algorithm.resolve import Relation, resolve

SOURCES = ("human", "ai", "ai-distant", "human+ai-distant")
DEBIAS = "-debias"
DATASET_RECIPES = tuple(name + suffix for name in SOURCES for suffix in ("", DEBIAS) if "ai" in name or not suffix)
PAPER_RECIPE = "human+ai-distant-debias"
HUMAN_RECIPE = "human"  # what a supervisor for distant supervision is trained on


class UnknownDatasetRecipe(InvalidInput):
    """A dataset recipe name that is not one of DATASET_RECIPES."""

    reason = "unknown_dataset_recipe"


class EmptyDataset(InvalidInput):
    """The recipe finds no preference pair in the store: nothing to train on, nothing is stored."""

    reason = "empty_dataset"


@dataclass(frozen=True)
class DistantSettings:
    """When the supervisor's rewards drop an AI relation (paper section 4.2 states no threshold; these are ours).

    margin: "a better than b" is dropped when the supervisor rewards b above a by more than `margin`. Default 0:
      every relation the human-trained RM contradicts goes, the strictest reading of "filter the annotations the
      RM disagrees with"; a larger margin keeps the AI's call where the RM is nearly indifferent.
    tie_margin: an AI tie ("no clear difference") is dropped when the rewards differ by more than `tie_margin`.
      Default None, ties are kept: a Bradley-Terry RM never learns what gap means "equal", so any number would be
      arbitrary, and a tie only merges two responses (no pair is made from it), so keeping it adds no wrong pair.
    """

    margin: float = 0.0
    tie_margin: float | None = None

    def __post_init__(self) -> None:
        for name in ("margin", "tie_margin"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and 0 <= value < float("inf")):
                raise ValueError(f"distant supervision {name} must be a finite number >= 0, got {value!r}")

    def as_json(self) -> dict[str, float | None]:
        return {"margin": self.margin, "tie_margin": self.tie_margin}


@dataclass(frozen=True)
class DatasetRecipe:
    name: str
    human: bool  # human annotations, resolved
    ai: bool  # AI annotations (where the prompt has no human ranking, when human is also set)
    distant: bool  # AI relations filtered by the supervisor's rewards first
    debias: bool  # length-balanced AI pairs

    @property
    def needs_scores(self) -> bool:
        return self.ai and self.distant


def dataset_recipe(name: str) -> DatasetRecipe:
    """The recipe of a name in DATASET_RECIPES; UnknownDatasetRecipe names the known ones."""
    if name not in DATASET_RECIPES:
        raise UnknownDatasetRecipe(f"dataset recipe {name!r} is unknown; known: {', '.join(DATASET_RECIPES)}")
    debias = name.endswith(DEBIAS)
    source = name.removesuffix(DEBIAS)
    return DatasetRecipe(name, "human" in source, "ai" in source, "distant" in source, debias)


@dataclass(frozen=True)
class AnnotatedPrompt:
    """One prompt of the store with its annotations' relations by annotator kind (discarded ones removed)."""

    prompt_id: str
    text: str
    responses: tuple[Response, ...]
    human: tuple[Relation, ...] = ()
    ai: tuple[Relation, ...] = ()
    category: tuple[str, ...] = ()
    system_prompt: str | None = None
    history: tuple[Mapping[str, str], ...] = ()

    def extra(self) -> dict[str, Any]:
        """The fields of its preference line beyond input, responses and annotations."""
        out: dict[str, Any] = {"category": list(self.category)} if self.category else {}
        if self.system_prompt:
            out["sys_prompt"] = self.system_prompt
        if self.history:
            out["history"] = [{"role": t["role"], "content": t["content"]} for t in self.history]
        return out


def without(relations: Sequence[Relation], discarded: set[str] | frozenset[str]) -> tuple[Relation, ...]:
    return tuple(r for r in relations if r.better not in discarded and r.worse not in discarded)


@dataclass
class DatasetStats:
    prompts: int = 0  # prompts with at least one pair in the dataset
    resolved: int = 0  # prompts whose relations were resolved into a ranking (the dataset's "rankings")
    pairs_before: int = 0  # pairs before length debiasing
    pairs: int = 0
    ai_relations: int = 0  # before distant supervision
    ai_relations_dropped: int = 0  # by distant supervision: preferences the supervisor contradicts
    ai_ties_dropped: int = 0  # by distant supervision: ties the supervisor separates by more than tie_margin
    sources: dict[str, int] = field(default_factory=dict)  # prompts ranked from "human" / "ai" relations
    pairs_by_source: dict[str, dict[str, int]] = field(default_factory=dict)  # source -> {"before", "after"} debias

    def as_json(self) -> dict[str, Any]:
        """What a dataset records of how it was made (stored with it, shown by `cheems status --json`)."""
        return {
            "prompts": self.prompts,
            "rankings": self.resolved,
            "prompts_by_source": dict(self.sources),
            "ai_relations": self.ai_relations,
            "ai_relations_dropped_by_distant_supervision": self.ai_relations_dropped,
            "ai_ties_dropped_by_distant_supervision": self.ai_ties_dropped,
            "pairs_by_source": {k: dict(v) for k, v in self.pairs_by_source.items()},
            "pairs": self.pairs,
        }


def prompt_rank(
    prompt: AnnotatedPrompt,
    recipe: DatasetRecipe,
    scores: Mapping[str, float] | None,
    stats: DatasetStats,
    distant: DistantSettings = DistantSettings(),
) -> dict[str, int]:
    """The prompt's ranking under the recipe ({} when it has no relation the recipe takes)."""
    if recipe.human and prompt.human:
        source, relations = "human", list(prompt.human)
    elif recipe.ai and prompt.ai:
        source, relations = "ai", list(prompt.ai)
    else:
        return {}
    stats.sources[source] = stats.sources.get(source, 0) + 1
    stats.resolved += 1
    if source == "ai":
        stats.ai_relations += len(relations)
    if source == "ai" and recipe.distant and scores is not None:
        tie_margin = float("inf") if distant.tie_margin is None else distant.tie_margin
        filtered = distant_supervision(relations, scores, distant.margin, tie_margin)
        stats.ai_ties_dropped += sum(r.tie for r in filtered.dropped)
        stats.ai_relations_dropped += sum(not r.tie for r in filtered.dropped)
        return filtered.resolution.rank
    return resolve(relations).rank


def ranked_pairs(responses: Sequence[Response], rank: Mapping[str, int]) -> list[tuple[str, str]]:
    """(better id, worse id) for every two ranked responses with different ranks, in response order."""
    ids = [r.id for r in responses if r.id in rank]
    return [
        (a, b) if rank[a] < rank[b] else (b, a) for i, a in enumerate(ids) for b in ids[i + 1 :] if rank[a] != rank[b]
    ]


def preference_pairs(
    prompts: Sequence[AnnotatedPrompt],
    recipe: DatasetRecipe,
    scores: Mapping[str, Mapping[str, float]] | None = None,
    seed: int = 0,
    distant: DistantSettings = DistantSettings(),
) -> tuple[list[PreferenceItem], DatasetStats]:
    """The dataset's lines, in the given prompt order: each prompt's ranked pairs, debiased when asked.

    `scores` ({prompt id: {response id: reward}}) are the supervisor's rewards for distant supervision; a
    recipe that filters AI relations (`needs_scores`) refuses to run without them (`build` makes it wait for a
    supervisor), and judges with `distant`. Length debiasing, when asked, balances the AI-ranked pairs only; human
    pairs are kept as they are.
    """
    if recipe.needs_scores and scores is None:
        raise InvalidInput(f"dataset recipe {recipe.name}: distant supervision needs the supervisor's rewards")
    stats = DatasetStats()
    pairs: dict[str, list[tuple[tuple[int, str], tuple[int, str]]]] = {"human": [], "ai": []}
    for n, prompt in enumerate(prompts):
        given = None if scores is None else scores.get(prompt.prompt_id, {})
        rank = prompt_rank(prompt, recipe, given, stats, distant)
        source = "human" if recipe.human and prompt.human else "ai"
        pairs[source] += [((n, better), (n, worse)) for better, worse in ranked_pairs(prompt.responses, rank)]
    content = {(n, r.id): r.content for n, p in enumerate(prompts) for r in p.responses}
    kept = {"human": pairs["human"], "ai": pairs["ai"]}
    if recipe.debias:
        kept["ai"] = length_debias(pairs["ai"], lambda key: len(content[key]), seed).pairs
    stats.pairs_by_source = {
        source: {"before": len(pairs[source]), "after": len(kept[source])} for source in pairs if pairs[source]
    }
    merged = sorted(kept["human"] + kept["ai"], key=lambda pair: pair[0][0])  # prompt order; each source's order
    stats.pairs_before, stats.pairs = len(pairs["human"]) + len(pairs["ai"]), len(merged)
    by_prompt: dict[int, list[tuple[str, str]]] = {}
    for (n, chosen), (_, rejected) in merged:
        by_prompt.setdefault(n, []).append((chosen, rejected))
    items = []
    for n in sorted(by_prompt):
        prompt = prompts[n]
        paired = {i for pair in by_prompt[n] for i in pair}
        responses = tuple(r for r in prompt.responses if r.id in paired)
        items.append(PreferenceItem(prompt.text, responses, tuple(by_prompt[n]), prompt.extra()))
    stats.prompts = len(items)
    return items, stats
