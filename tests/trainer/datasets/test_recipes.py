"""Dataset recipes: hand-computed pairs from human and AI annotations, distant supervision, length debiasing."""

from __future__ import annotations

import pytest

from cheems.errors import InvalidInput
from cheems.formats.responses import Response
from services.annotation.algorithm.resolve import Relation
from trainer.datasets.recipes import (
    DATASET_RECIPES,
    PAPER_RECIPE,
    AnnotatedPrompt,
    DistantSettings,
    UnknownDatasetRecipe,
    dataset_recipe,
    preference_pairs,
)

# 甲: human order a > b > c, and one AI verdict c > a (which the human ranking contradicts)
JIA = AnnotatedPrompt(
    "p-jia",
    "什么是奖励模型？",
    (Response("a", "打分的模型"), Response("b", "一种评价回答的模型"), Response("c", "不知")),
    human=(Relation("a", "b"), Relation("b", "c"), Relation("a", "c")),
    ai=(Relation("c", "a"),),
    category=("知识",),
    system_prompt="你是助手",
)
# 乙: AI verdicts only, x > y and y = z
YI = AnnotatedPrompt(
    "p-yi",
    "你好",
    (Response("x", "你好！"), Response("y", "嗯"), Response("z", "哦")),
    ai=(Relation("x", "y"), Relation("y", "z", tie=True)),
    history=({"role": "user", "content": "在吗"}, {"role": "assistant", "content": "在"}),
)
# 丙: human p > q, equal lengths
BING = AnnotatedPrompt("p-bing", "一加一", (Response("p", "二"), Response("q", "三")), human=(Relation("p", "q"),))


def pairs_of(items: list) -> dict[str, tuple]:
    return {item.input: item.pairs for item in items}


def test_recipe_names() -> None:
    assert set(DATASET_RECIPES) == {
        *("human", "ai", "ai-distant", "human+ai-distant"),
        *("ai-debias", "ai-distant-debias", "human+ai-distant-debias"),  # debiasing touches AI pairs only
    }
    both = dataset_recipe(PAPER_RECIPE)
    assert (both.name, both.human, both.ai, both.distant, both.debias) == ("human+ai-distant-debias", *[True] * 4)
    assert not dataset_recipe("human").ai and not dataset_recipe("ai").distant
    for wrong in ("humans", "human-debias"):
        with pytest.raises(UnknownDatasetRecipe, match=rf"'{wrong}'.*known: human, ai, ai-debias, ai-distant"):
            dataset_recipe(wrong)


def test_human_and_ai_pairs() -> None:
    items, stats = preference_pairs([JIA, YI, BING], dataset_recipe("human"))
    assert pairs_of(items) == {"什么是奖励模型？": (("a", "b"), ("a", "c"), ("b", "c")), "一加一": (("p", "q"),)}
    assert (stats.prompts, stats.pairs, stats.resolved) == (2, 4, 2)
    assert items[0].extra == {"category": ["知识"], "sys_prompt": "你是助手"}  # context kept
    items, stats = preference_pairs([JIA, YI, BING], dataset_recipe("ai"))
    # 乙: x (rank 1) > y = z (rank 2): x > y and x > z
    assert pairs_of(items) == {"什么是奖励模型？": (("c", "a"),), "你好": (("x", "y"), ("x", "z"))}
    assert items[0].responses == (Response("a", "打分的模型"), Response("c", "不知"))  # only the paired ones
    assert items[1].extra["history"] == [{"role": "user", "content": "在吗"}, {"role": "assistant", "content": "在"}]


def test_distant_supervision_drops_what_the_model_contradicts() -> None:
    scores = {"p-jia": {"a": 2.0, "b": 1.0, "c": 0.0}, "p-yi": {"x": 0.0, "y": 1.0, "z": 1.1}}
    items, stats = preference_pairs([JIA, YI], dataset_recipe("ai-distant"), scores)
    # 甲: c > a contradicted (0.0 < 2.0) -> no pair; 乙: x > y contradicted, y = z kept (a tie keeps any gap)
    assert pairs_of(items) == {} and stats.ai_relations_dropped == 2
    scores["p-yi"]["x"] = 1.5
    items, _ = preference_pairs([JIA, YI], dataset_recipe("ai-distant"), scores)
    assert pairs_of(items) == {"你好": (("x", "y"), ("x", "z"))}
    # without a supervisor's rewards no AI relation is taken unfiltered
    with pytest.raises(InvalidInput, match="needs the supervisor's rewards"):
        preference_pairs([JIA, YI], dataset_recipe("ai-distant"), None)


def test_distant_margins_are_settings() -> None:
    """margin: how far the supervisor may prefer the AI's "worse" before the relation goes; tie_margin: how far
    apart it may put an AI tie (default None: ties are kept)."""
    scores = {"p-yi": {"x": 0.8, "y": 1.0, "z": 1.5}}  # x > y contradicted by 0.2; y = z separated by 0.5
    recipe = dataset_recipe("ai-distant")
    _, strict = preference_pairs([YI], recipe, scores)
    assert (strict.ai_relations_dropped, strict.ai_ties_dropped) == (1, 0)
    items, lenient = preference_pairs([YI], recipe, scores, distant=DistantSettings(margin=0.25))
    assert pairs_of(items) == {"你好": (("x", "y"), ("x", "z"))} and lenient.ai_relations_dropped == 0
    items, ties = preference_pairs([YI], recipe, scores, distant=DistantSettings(margin=0.25, tie_margin=0.4))
    # the tie goes (0.5 > 0.4): x > y alone ranks x over y, z unranked
    assert pairs_of(items) == {"你好": (("x", "y"),)} and (ties.ai_relations_dropped, ties.ai_ties_dropped) == (0, 1)
    assert ties.as_json()["ai_ties_dropped_by_distant_supervision"] == 1
    assert DistantSettings(0.1, 0.4).as_json() == {"margin": 0.1, "tie_margin": 0.4}
    for bad in ({"margin": -0.1}, {"margin": float("inf")}, {"tie_margin": float("nan")}, {"margin": "0"}):
        with pytest.raises(ValueError, match=r"distant supervision .*margin must be a finite number >= 0"):
            DistantSettings(**bad)  # type: ignore[arg-type]


def test_human_first_then_distant_ai() -> None:
    scores = {"p-yi": {"x": 3.0, "y": 1.0, "z": 1.0}}
    items, stats = preference_pairs([JIA, YI, BING], dataset_recipe("human+ai-distant"), scores)
    assert pairs_of(items) == {
        "什么是奖励模型？": (("a", "b"), ("a", "c"), ("b", "c")),  # human: the AI verdict is not used
        "你好": (("x", "y"), ("x", "z")),
        "一加一": (("p", "q"),),
    }
    assert stats.sources == {"human": 2, "ai": 1}


# 甲 as AI annotations only: a(5) > b(9) shorter chosen, a(5) > c(2) and b(9) > c(2) longer chosen
JIA_AI = AnnotatedPrompt(JIA.prompt_id, JIA.text, JIA.responses, ai=JIA.human)
BING_AI = AnnotatedPrompt(BING.prompt_id, BING.text, BING.responses, ai=BING.human)  # p(1) > q(1): equal lengths


def test_length_debiasing_balances_the_ai_pairs() -> None:
    for seed in range(5):
        items, stats = preference_pairs([JIA_AI, BING_AI], dataset_recipe("ai-debias"), seed=seed)
        kept = [pair for item in items for pair in item.pairs]
        assert (stats.pairs_before, stats.pairs) == (4, 3)
        assert ("a", "b") in kept and ("p", "q") in kept  # the one shorter-chosen and the equal pair stay
        assert len({("a", "c"), ("b", "c")} & set(kept)) == 1
        assert stats.pairs_by_source == {"ai": {"before": 4, "after": 3}}


def test_human_pairs_enter_untouched_by_debiasing() -> None:
    """The paper debiases the AI-annotated subset, then adds the human one: 甲's human pairs, two of them
    longer-chosen, all stay; the AI prompt's pairs are the ones balanced."""
    scores = {"p-bing": {"p": 1.0, "q": 0.0}}
    for seed in range(5):
        items, stats = preference_pairs([JIA, BING_AI], dataset_recipe(PAPER_RECIPE), scores, seed=seed)
        assert pairs_of(items)["什么是奖励模型？"] == (("a", "b"), ("a", "c"), ("b", "c"))
        assert stats.pairs_by_source == {"human": {"before": 3, "after": 3}, "ai": {"before": 1, "after": 1}}
        assert stats.as_json()["pairs_by_source"] == stats.pairs_by_source
