"""Annotator quality (pure): agreement with resolved rankings and the share of annotations on cycles."""

from __future__ import annotations

import pytest

from services.annotation.algorithm.quality import Judgment, annotator_quality, cycle_pairs, stored_relations
from services.annotation.algorithm.resolve import Relation


def judged(annotator: str, prompt: str, order: list[list[str]], kind: str = "human", discarded: str = "") -> Judgment:
    return Judgment(annotator, kind, prompt, stored_relations({"order": order}), frozenset(discarded.split()))


def test_stored_results_become_relations() -> None:
    assert stored_relations({"order": [["a"], ["b", "c"]]}) == (
        Relation("b", "c", tie=True), Relation("a", "b"), Relation("a", "c")
    )  # fmt: skip
    assert stored_relations({"better": "a", "worse": "b"}) == (Relation("a", "b"),)
    assert stored_relations({"equal": ["a", "b"]}) == (Relation("a", "b", tie=True),)


def test_only_preferences_inside_a_cycle_are_on_cycles() -> None:
    relations = [
        Relation("a", "b"),
        Relation("b", "c"),
        Relation("c", "b"),
        Relation("c", "d"),
        Relation("e", "f", True),
    ]
    assert cycle_pairs(relations) == {("b", "c"), ("c", "b")}  # a tie alone is no conflict


def test_agreement_and_cycle_share_per_person() -> None:
    judgments = [
        judged("甲", "p", [["a"], ["b"], ["c"]]),
        judged("乙", "p", [["b"], ["a"], ["c"]]),  # contradicts 甲 on a, b: a cycle, ranked tied
        judged("甲", "q", [["x"], ["y", "z"]]),
        judged("裁判", "q", [["z"], ["x"]], kind="ai"),  # an AI annotation: in the graph, not in the figures
        judged("丙", "r", [["m"], ["n"]]),  # no ranking yet: counted, not compared
    ]
    rankings = {"p": {"a": 1, "b": 1, "c": 2}, "q": {"x": 1, "y": 2, "z": 1}}
    figures = annotator_quality(judgments, rankings)
    assert set(figures) == {"甲", "乙", "丙"}
    first = figures["甲"]
    # p: a>b no, a>c yes, b>c yes; q: y=z no, x>y yes, x>z no (z, x on a cycle with the AI's z > x)
    assert (first.annotations, first.compared, first.agreeing, first.on_cycles) == (2, 6, 3, 2)
    assert first.agreement == pytest.approx(0.5) and first.cycle_share == 1.0
    assert (figures["乙"].agreeing, figures["乙"].compared, figures["乙"].on_cycles) == (2, 3, 1)
    assert figures["丙"].agreement is None and figures["丙"].cycle_share == 0.0


def test_discarded_responses_leave_the_figures() -> None:
    judgments = [judged("甲", "p", [["a"], ["b"], ["c"]], discarded="c"), judged("乙", "p", [["c"], ["a"]])]
    figures = annotator_quality(judgments, {"p": {"a": 1, "b": 2}})
    assert (figures["甲"].compared, figures["甲"].agreeing) == (1, 1)  # only a > b is left
    assert figures["乙"].compared == 0 and figures["乙"].on_cycles == 0


def test_a_discard_is_a_vote_in_the_figures_as_in_the_ranking() -> None:
    judgments = [
        judged("甲", "p", [["a"], ["b"]], discarded="c"),  # one of three that saw c: c stays for the others
        judged("乙", "p", [["c"], ["a"]]),
        judged("丙", "p", [["a"], ["c"]]),  # with 乙's c > a: a cycle (resolution ties a and c)
    ]
    figures = annotator_quality(judgments, {"p": {"a": 1, "c": 1, "b": 2}})
    # the old rule (any discard drops the response for everyone) compared nothing of 乙's and 丙's, and saw no cycle
    assert (figures["乙"].compared, figures["乙"].agreeing, figures["乙"].on_cycles) == (1, 0, 1)
    assert (figures["丙"].compared, figures["丙"].on_cycles) == (1, 1)
    assert (figures["甲"].compared, figures["甲"].agreeing, figures["甲"].on_cycles) == (1, 1, 0)
    most = [*judgments, judged("丁", "p", [["a"], ["b"]], discarded="c")]  # now two of four: still no majority
    assert annotator_quality(most, {"p": {"a": 1, "c": 1, "b": 2}})["乙"].compared == 1
    gone = [*most, judged("戊", "p", [["b"]], discarded="c")]  # three of five: c leaves the prompt
    assert annotator_quality(gone, {"p": {"a": 1, "b": 2}})["乙"].compared == 0
