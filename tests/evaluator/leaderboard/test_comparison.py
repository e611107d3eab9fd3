"""Two models side by side, as pure functions: per-category differences (A - B) and the prompts where their
rewards disagree most on the gold comparisons (one model right, the other wrong)."""

from __future__ import annotations

import pytest

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from evaluator.leaderboard.comparison import ScoredItem, category_deltas, disagreement, disagreements, reward_positions
from evaluator.metrics import CategoryMetrics, EvalResult, Semantics, SubsetMetrics


def item(index: int, ranks: list[int], rewards: list[float], subset: str = "open", text: str = "") -> ScoredItem:
    ids = [f"r{i + 1}" for i in range(len(ranks))]
    bench = BenchItem(
        text or f"问题{index}",
        tuple(Response(i, f"回答{i}") for i in ids),
        dict(zip(ids, ranks, strict=True)),
        ("代码",),
    )
    return ScoredItem(subset, f"{subset}:{index}", bench, dict(zip(ids, rewards, strict=True)))


def test_a_disagreement_is_a_gold_comparison_exactly_one_model_orders_right() -> None:
    found = disagreement(item(0, [1, 2, 3], [3.0, 2.0, 1.0]), item(0, [1, 2, 3], [1.0, 2.0, 3.0]))
    assert (found.comparisons, found.disagreements, found.a_right, found.b_right) == (3, 3, 3, 0)
    tied_gold = disagreement(item(0, [1, 1, 2], [1.0, 2.0, 0.0]), item(0, [1, 1, 2], [2.0, 1.0, 0.0]))
    assert (tied_gold.comparisons, tied_gold.disagreements) == (2, 0)  # r1 ~ r2 is no comparison
    tied_reward = disagreement(item(0, [1, 2], [1.0, 1.0]), item(0, [1, 2], [2.0, 1.0]))
    assert (tied_reward.disagreements, tied_reward.a_right, tied_reward.b_right) == (1, 0, 1)  # a tie is not right


def test_prompts_are_ordered_by_their_share_of_disagreement_and_agreeing_ones_left_out() -> None:
    a = [item(0, [1, 2, 3], [3, 2, 1]), item(1, [1, 2], [2, 1]), item(2, [1, 2, 3], [3, 2, 1]), item(3, [1, 2], [2, 1])]
    b = [item(0, [1, 2, 3], [3, 1, 2]), item(1, [1, 2], [1, 2]), item(2, [1, 2, 3], [3, 2, 1]),
         item(4, [1, 2], [1, 2])]  # fmt: skip
    found = disagreements(a, b, limit=10)
    assert [(d.a.item, d.disagreements, d.comparisons) for d in found] == [("open:1", 1, 1), ("open:0", 1, 3)]
    assert [d.a.item for d in disagreements(a, b, limit=1)] == ["open:1"]


def test_prompts_are_matched_by_subset_text_and_responses_not_by_position() -> None:
    a = [item(0, [1, 2], [2, 1], text="甲"), item(1, [1, 2], [2, 1], text="乙")]
    b = [item(0, [1, 2], [1, 2], text="乙"), item(1, [1, 2], [2, 1], text="甲")]  # the file's lines reordered
    (found,) = disagreements(a, b, limit=10)
    assert (found.a.bench.input, found.a.item, found.b.item) == ("乙", "open:1", "open:0")
    assert disagreements(a, [item(0, [1, 2], [1, 2], subset="human", text="甲")], limit=10) == []


def test_reward_positions_share_a_place_on_a_tie() -> None:
    assert reward_positions({"r1": 0.5, "r2": 2.0, "r3": 0.5, "r4": -1.0}) == {"r1": 2, "r2": 1, "r3": 2, "r4": 4}


def result(per_category: dict[str, tuple[float | None, float]], name: str = "open") -> EvalResult:
    categories = {c: CategoryMetrics(acc, exact, None, 1, 1) for c, (acc, exact) in per_category.items()}
    return EvalResult(Semantics.PAPER, 0.5, {name: SubsetMetrics(0.5, 0.5, None, categories, 1, 1)})


def test_category_differences_are_a_minus_b_and_none_where_either_lacks_a_figure() -> None:
    a = result({"代码": (0.75, 0.5), "数学": (None, 1.0), "安全": (0.5, 0.0)})
    b = result({"代码": (0.25, 1.0), "数学": (0.5, 0.5), "知识": (1.0, 1.0)})
    rows = {d.category: d for d in category_deltas(a, b)}
    assert list(rows) == sorted(["代码", "数学", "安全", "知识"])
    assert rows["代码"].accuracy_difference == pytest.approx(0.5) and rows["代码"].exact_match_difference == -0.5
    assert rows["数学"].accuracy_difference is None and rows["数学"].exact_match_difference == 0.5
    assert rows["安全"].b is None and rows["安全"].exact_match_difference is None
    other = category_deltas(a, result({"代码": (0.5, 0.5)}, name="human"))
    assert [(d.subset, d.a is None, d.b is None) for d in other][-1] == ("human", True, False)
