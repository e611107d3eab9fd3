"""Two verdicts per pair make one outcome; outcomes make accuracy and exact match like a reward model's margins."""

from __future__ import annotations

import pytest

from evaluator.judging.outcomes import JudgedPrompt, Outcome, combine, judged_result, tally
from evaluator.metrics import Semantics
from services.annotation.judge.pairwise import Verdict

A, B, C = Verdict.A, Verdict.B, Verdict.TIE
R, W, T, N, U = Outcome.RIGHT, Outcome.WRONG, Outcome.TIE, Outcome.INCONSISTENT, Outcome.UNPARSEABLE


@pytest.mark.parametrize(
    ("better_first", "better_second", "outcome"),
    [
        (A, B, R),  # the better response wins wherever it is shown
        (B, A, W),  # the worse one wins wherever it is shown
        (C, C, T),
        (A, A, N),  # always the first shown: position, not quality
        (B, B, N),  # always the second shown
        (A, C, N),
        (C, B, N),
        (None, B, U),
        (A, None, U),
        (None, None, U),
    ],
)
def test_two_orders_make_one_outcome(
    better_first: Verdict | None, better_second: Verdict | None, outcome: Outcome
) -> None:
    assert combine(better_first, better_second) is outcome


def test_metrics_macro_average_categories_and_subsets() -> None:
    open_ = [
        JudgedPrompt("知识", (R, R, W)),
        JudgedPrompt("知识", (R,)),
        JudgedPrompt("数学", (N,)),
    ]
    human = [JudgedPrompt("语言", (R, R)), JudgedPrompt("语言", (U, R))]
    result = judged_result({"open": open_, "human": human})
    assert result.semantics is Semantics.PAPER
    knowledge = result.subsets["open"].per_category["知识"]
    assert (knowledge.accuracy, knowledge.exact_match, knowledge.prompts, knowledge.pairs) == (0.75, 0.5, 2, 4)
    assert knowledge.ece is None
    assert result.subsets["open"].accuracy == pytest.approx((0.75 + 0.0) / 2)
    assert result.subsets["open"].exact_match == pytest.approx((0.5 + 0.0) / 2)
    assert result.subsets["open"].ece is None
    assert (result.subsets["human"].accuracy, result.subsets["human"].exact_match) == (0.75, 0.5)
    assert result.overall == pytest.approx(((0.375 + 0.25) / 2 + (0.75 + 0.5) / 2) / 2)


def test_official_semantics_lets_ties_and_inconsistency_keep_exact_match_but_not_wrong_or_unparseable() -> None:
    prompts = [
        JudgedPrompt("知识", (R, T)),
        JudgedPrompt("知识", (N,)),
        JudgedPrompt("知识", (W,)),
        JudgedPrompt("知识", (U, R)),
    ]
    paper = judged_result({"s": prompts}, Semantics.PAPER).subsets["s"]
    official = judged_result({"s": prompts}, Semantics.OFFICIAL).subsets["s"]
    assert paper.accuracy == official.accuracy == pytest.approx(2 / 6)
    assert paper.exact_match == 0.0
    assert official.exact_match == 0.5


def test_tally_names_every_outcome() -> None:
    counts = tally([JudgedPrompt("知识", (R, N, N)), JudgedPrompt("数学", (U,))])
    assert counts == {"right": 1, "wrong": 0, "tie": 0, "inconsistent": 2, "unparseable": 1}
