"""Table 4's pure part: the training order, the config's refusals, rows averaged over seeds, a failed recipe's row,
the text table, the JSON and the chart's series."""

from __future__ import annotations

import json

import pytest

from trainer.ablation import (
    TABLE4,
    AblationConfig,
    Run,
    Score,
    chart_series,
    plan,
    render,
    short,
    table_rows,
    to_json,
)
from trainer.datasets.recipes import DATASET_RECIPES, UnknownDatasetRecipe

BENCH = ("/b/open.jsonl", "/b/human.jsonl")


def scored(recipe: str, seed: int, overall: float, open_: tuple[float, float], human: tuple[float, float]) -> Run:
    subsets = {"open": Score(*open_), "human": Score(*human)}
    return Run(
        recipe, seed, f"ds-{recipe}", 10 + seed, "", f"t-{recipe}-{seed}", f"rm-{recipe}-{seed}", overall, subsets
    )


@pytest.mark.parametrize(
    ("asked", "order"),
    [
        (("ai", "human"), ("human", "ai")),  # human first, as asked
        (("ai-distant", "ai"), ("human", "ai-distant", "ai")),  # added: it supervises ai-distant
        (("human+ai-distant-debias",), ("human", "human+ai-distant-debias")),
        (("ai", "ai-debias", "ai"), ("ai", "ai-debias")),  # nothing needs a supervisor; each once
        (tuple(TABLE4), tuple(TABLE4)),
    ],
)
def test_plan_puts_human_first_when_asked_or_needed(asked: tuple[str, ...], order: tuple[str, ...]) -> None:
    assert plan(asked) == order


def test_table4_rows_are_dataset_recipes_and_the_default() -> None:
    assert set(TABLE4) <= set(DATASET_RECIPES)
    assert AblationConfig(BENCH).recipes == tuple(TABLE4)
    assert TABLE4["human+ai-distant-debias"] == "CheemsPreference"


def test_an_unknown_recipe_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(UnknownDatasetRecipe) as error:
        AblationConfig(BENCH, recipes=("human", "gpt"))
    assert "'gpt'" in str(error.value) and all(name in str(error.value) for name in DATASET_RECIPES)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bench": ()}, "bench: at least one"),
        ({"bench": ("/a/open.jsonl", "/b/open.jsonl")}, "share a stem"),
        ({"recipes": ()}, "recipes: at least one"),
        ({"seeds": ()}, "seeds: distinct"),
        ({"seeds": (1, 1)}, "seeds: distinct"),
        ({"seeds": (-1,)}, "seeds: distinct"),
        ({"overrides": {"eval_files": "[]"}}, "eval_files is set by the ablation"),
        ({"overrides": {"seed": "3"}}, "seed is set by the ablation"),
        ({"poll_seconds": 0}, "poll_seconds must be > 0"),
        ({"timeout": -1}, "timeout >= 0"),
    ],
)
def test_config_refuses_naming_the_field(fields: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        AblationConfig(**{"bench": BENCH, **fields})


def test_rows_average_the_seeds_and_say_why_a_recipe_has_no_model() -> None:
    runs = [
        scored("human", 0, 0.6, (0.8, 0.4), (0.7, 0.5)),
        scored("human", 1, 0.8, (1.0, 0.6), (0.9, 0.7)),
        Run("ai", 0, error="dataset recipe ai: no preference pair among 4 ranked prompts"),
        Run("ai", 1, error="dataset recipe ai: no preference pair among 4 ranked prompts"),
        scored("ai-distant", 0, 0.5, (0.5, 0.5), (0.5, 0.5)),
        Run("ai-distant", 1, pairs=12, error="training t9 failed: cheems train exited with status 1:\nline\nOOM"),
    ]
    human, ai, distant = table_rows(runs, ["human", "ai", "ai-distant"])
    assert (human.recipe, human.paper_row, human.seeds, human.pairs) == ("human", "Human subset", (0, 1), 10)
    assert human.overall == pytest.approx(0.7) and human.note == ""
    assert human.subsets["open"].accuracy == pytest.approx(0.9)
    assert human.subsets["human"].exact_match == pytest.approx(0.6)
    assert (ai.seeds, ai.pairs, ai.overall, dict(ai.subsets)) == ((), None, None, {})
    assert ai.note.startswith("seed 0: dataset recipe ai: no preference pair") and "; seed 1: " in ai.note
    assert distant.seeds == (0,) and distant.overall == pytest.approx(0.5) and distant.pairs == 11
    assert distant.note == "seed 1: training t9 failed: cheems train exited with status 1 ... OOM"


def test_a_recipe_not_in_the_runs_has_a_row_saying_nothing_ran() -> None:
    (row,) = table_rows([], ["ai"])
    assert (row.overall, row.seeds, row.note) == (None, (), "")


def test_short_keeps_one_line_and_bounds_its_length() -> None:
    assert short("one line") == "one line"
    assert short("head:\nmiddle\n\nlast\n") == "head ... last"
    assert len(short("x" * 500)) == 120 and short("x" * 500).endswith("...")


def test_render_has_a_column_per_subset_figure_and_dashes_where_none() -> None:
    rows = table_rows(
        [scored("human", 0, 0.65, (0.9, 0.3), (0.8, 0.6)), Run("ai", 0, error="no pair")], ["human", "ai"]
    )
    lines = render(rows, ["open", "human"]).splitlines()
    assert lines[0].split() == [
        *("Recipe", "Table", "4", "Seeds", "Pairs", "Overall"),
        *("open", "Acc.", "open", "Exact.", "human", "Acc.", "human", "Exact.", "Note"),
    ]
    assert lines[2].split() == ["human", "Human", "subset", "0", "10", "0.6500", "0.9000", "0.3000", "0.8000", "0.6000"]
    assert lines[3].split() == ["ai", "GPT", "subset", "-", "-", "-", "-", "-", "-", "-", "no", "pair"]


def test_json_holds_the_question_the_rows_and_every_run() -> None:
    config = AblationConfig(BENCH, recipes=("human", "ai"), seeds=(0,), overrides={"epochs": "1"})
    runs = [scored("human", 0, 0.65, (0.9, 0.3), (0.8, 0.6)), Run("ai", 0, error="no pair")]
    data = json.loads(json.dumps(to_json(config, table_rows(runs, plan(config.recipes)), runs)))
    assert (data["subsets"], data["seeds"], data["overrides"]) == (["open", "human"], [0], {"epochs": "1"})
    assert [r["recipe"] for r in data["rows"]] == ["human", "ai"]
    assert data["rows"][0]["subsets"]["open"] == {"accuracy": 0.9, "exact_match": 0.3}
    assert data["rows"][1] == {
        **{"recipe": "ai", "paper_row": "GPT subset", "seeds": [], "pairs": None, "overall": None},
        **{"subsets": {}, "note": "no pair"},
    }
    assert data["runs"][0]["model_id"] == "rm-human-0" and data["runs"][1]["error"] == "no pair"


def test_chart_series_have_one_value_per_row() -> None:
    rows = table_rows([scored("human", 0, 0.65, (0.9, 0.3), (0.8, 0.6)), Run("ai", 0, error="x")], ["human", "ai"])
    series = chart_series(rows, ["open", "human"])
    assert list(series) == ["Overall", "open Acc.", "open Exact.", "human Acc.", "human Exact."]
    assert series["Overall"] == [0.65, None] and series["human Exact."] == [0.6, None]
