"""Metric values against hand-computed cases, and properties over generated benchmarks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluator.errors import EvaluationError
from evaluator.metrics import (
    ScoredPrompt,
    Semantics,
    category_metrics,
    evaluate_subsets,
    ranked_pairs,
    subset_metrics,
)

PAPER, OFFICIAL = Semantics.PAPER, Semantics.OFFICIAL


def p(ranks: list[int], rewards: list[float], category: str = "推理") -> ScoredPrompt:
    return ScoredPrompt(category, tuple(ranks), tuple(float(r) for r in rewards))


def test_ranked_pairs_orders_better_first_and_skips_gold_ties() -> None:
    assert ranked_pairs([2, 1, 2, 3]) == [(1, 0), (0, 3), (1, 2), (1, 3), (2, 3)]
    assert ranked_pairs([1, 1, 1]) == []


def test_five_responses_hand_computed() -> None:
    # gold: a=1, b=2, c=2, d=3, e=4 -> pairs with different ranks: 10 - 1 (b,c tie) = 9
    # rewards swap d and e: (d,e) wrong; every other pair right -> acc 8/9, not exact
    m = category_metrics([p([1, 2, 2, 3, 4], [5, 4, 3, 1, 2])])
    assert m.pairs == 9
    assert m.accuracy == pytest.approx(8 / 9)
    assert m.exact_match == 0.0


def test_reward_tie_on_a_gold_pair_counts_wrong_in_paper_semantics_only_for_exact_match() -> None:
    prompt = p([1, 2, 3], [2.0, 2.0, 1.0])  # pair (0,1) tied in reward
    paper, official = category_metrics([prompt], PAPER), category_metrics([prompt], OFFICIAL)
    assert paper.accuracy == official.accuracy == pytest.approx(2 / 3)
    assert paper.exact_match == 0.0
    assert official.exact_match == 1.0


def test_constant_reward_model() -> None:
    prompts = [p([1, 2, 3, 4, 5], [0.0] * 5), p([1, 1, 2, 3], [0.0] * 4)]
    assert category_metrics(prompts, PAPER).accuracy == 0.0
    assert category_metrics(prompts, PAPER).exact_match == 0.0
    assert category_metrics(prompts, OFFICIAL).exact_match == 1.0  # the official code's quirk


def test_tie_in_gold_rank_needs_no_order_in_reward() -> None:
    m = category_metrics([p([1, 1, 2], [0.3, 0.9, 0.1])])
    assert m.pairs == 2 and m.accuracy == 1.0 and m.exact_match == 1.0


def test_prompt_whose_responses_share_one_rank_is_an_exact_match_without_pairs() -> None:
    m = category_metrics([p([2, 2, 2, 2, 2], [1, 2, 3, 4, 5]), p([1, 2], [0, 1])])
    assert m.pairs == 1
    assert m.accuracy == 0.0
    assert m.exact_match == 0.5  # the single-rank prompt counts as exact


def test_four_response_prompt_and_pooling_within_a_category() -> None:
    four = p([1, 2, 3, 4], [4, 3, 1, 2])  # 6 pairs, 5 right
    five = p([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])  # 10 pairs, all right
    m = category_metrics([four, five])
    assert m.pairs == 16
    assert m.accuracy == pytest.approx(15 / 16)  # pooled, not (5/6 + 1) / 2
    assert m.exact_match == 0.5


def test_macro_average_over_categories_and_overall() -> None:
    reasoning = [p([1, 2], [1, 0], "推理"), p([1, 2], [0, 1], "推理"), p([1, 2], [1, 0], "推理")]
    safety = [p([1, 2, 3], [3, 2, 1], "安全")]
    s = subset_metrics(reasoning + safety)
    assert s.per_category["推理"].accuracy == pytest.approx(2 / 3)
    assert s.per_category["安全"].accuracy == 1.0
    assert s.accuracy == pytest.approx((2 / 3 + 1) / 2)  # macro, not 5/6 pooled over the subset
    assert s.exact_match == pytest.approx((2 / 3 + 1) / 2)
    assert (s.prompts, s.pairs) == (4, 6)
    result = evaluate_subsets({"open": reasoning + safety, "human": safety})
    expected = ((s.accuracy + s.exact_match) / 2 + 1.0) / 2
    assert result.overall == pytest.approx(expected)
    assert list(result.subsets) == ["open", "human"]


def test_single_category_subset_equals_its_category() -> None:
    prompts = [p([1, 2, 3], [1, 3, 2]), p([1, 2, 2, 3], [4, 3, 2, 1])]
    s = subset_metrics(prompts)
    c = category_metrics(prompts)
    assert (s.accuracy, s.exact_match) == (c.accuracy, c.exact_match)


def test_category_without_pairs_is_left_out_of_accuracy_but_not_exact_match() -> None:
    s = subset_metrics([p([1, 2], [0, 1], "推理"), p([1, 1], [0, 1], "安全")])
    assert s.per_category["安全"].accuracy is None
    assert s.accuracy == 0.0
    assert s.exact_match == 0.5


def test_subset_without_any_pair_is_an_error() -> None:
    with pytest.raises(EvaluationError, match="no comparisons"):
        subset_metrics([p([1, 1], [0, 1])])


def test_no_subsets_is_an_error() -> None:
    with pytest.raises(EvaluationError):
        evaluate_subsets({})


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        ScoredPrompt("推理", (1, 2), (0.0,))


# --- properties ---------------------------------------------------------------------------

CATEGORIES = ["推理", "数学", "安全", "理解"]


@st.composite
def bench(draw: st.DrawFn) -> list[tuple[str, list[int]]]:
    """Prompts as (category, gold ranks), each with at least two distinct ranks."""
    prompts = []
    for _ in range(draw(st.integers(1, 12))):
        n = draw(st.integers(2, 6))
        ranks = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n).filter(lambda r: len(set(r)) > 1))
        prompts.append((draw(st.sampled_from(CATEGORIES)), ranks))
    return prompts


def scored(prompts: list[tuple[str, list[int]]], reward_of_rank) -> list[ScoredPrompt]:  # type: ignore[no-untyped-def]
    return [ScoredPrompt(c, tuple(r), tuple(reward_of_rank(x) for x in r)) for c, r in prompts]


@settings(max_examples=200, deadline=None)
@given(bench(), st.sampled_from(list(Semantics)))
def test_rewards_ordered_as_gold_score_one(prompts: list[tuple[str, list[int]]], semantics: Semantics) -> None:
    s = subset_metrics(scored(prompts, lambda rank: -rank * 1.5), semantics)
    assert s.accuracy == 1.0 and s.exact_match == 1.0


@settings(max_examples=200, deadline=None)
@given(bench(), st.sampled_from(list(Semantics)))
def test_reversed_rewards_score_zero(prompts: list[tuple[str, list[int]]], semantics: Semantics) -> None:
    s = subset_metrics(scored(prompts, lambda rank: float(rank)), semantics)
    assert s.accuracy == 0.0 and s.exact_match == 0.0


@settings(max_examples=100, deadline=None)
@given(bench(), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_prompt_or_response_order(
    prompts: list[tuple[str, list[int]]], rng: random.Random
) -> None:
    noise = random.Random(0)
    items = [ScoredPrompt(c, tuple(r), tuple(noise.choice([0.0, 0.5, 1.0, 2.0]) for _ in r)) for c, r in prompts]
    shuffled = []
    for item in rng.sample(items, len(items)):
        order = rng.sample(range(len(item.ranks)), len(item.ranks))
        shuffled.append(
            ScoredPrompt(item.category, tuple(item.ranks[i] for i in order), tuple(item.rewards[i] for i in order))
        )
    for semantics in Semantics:
        assert subset_metrics(shuffled, semantics) == subset_metrics(items, semantics)


@settings(max_examples=100, deadline=None)
@given(bench(), st.lists(st.floats(-3, 3, allow_nan=False), min_size=40, max_size=40))
def test_paper_semantics_never_scores_above_official(prompts: list[tuple[str, list[int]]], pool: list[float]) -> None:
    rewards = iter(pool * 10)
    items = [ScoredPrompt(c, tuple(r), tuple(round(next(rewards)) for _ in r)) for c, r in prompts]
    paper, official = subset_metrics(items, PAPER), subset_metrics(items, OFFICIAL)
    assert paper.accuracy == official.accuracy
    assert paper.exact_match <= official.exact_match
