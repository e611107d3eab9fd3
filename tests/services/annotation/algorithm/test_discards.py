"""A discard is its annotator's vote (`algorithm.discards`): a response leaves the prompt only when most annotations
that saw it discard it; otherwise only the discarding annotation's own relations of it go."""

from __future__ import annotations

from services.annotation.algorithm.discards import Vote, dropped, kept_relations, vote_of
from services.annotation.algorithm.resolve import Relation, relations_of_order, resolve


def ranked(*groups: list[str], discarded: tuple[str, ...] = ()) -> Vote:
    return vote_of(relations_of_order(groups), discarded)


def test_one_annotator_discarding_everything_removes_only_their_own_relations() -> None:
    votes = [
        ranked(["r1"], ["r2"], ["r3"], discarded=("r1", "r2", "r3")),  # they saw r1..r3 and discard them all
        ranked(["r1"], ["r2"], ["r4"]),
        ranked(["r2"], ["r3"], ["r4"]),
    ]
    assert dropped(votes) == frozenset()  # r1, r2, r3: one of two (or three) annotations that saw them
    kept = kept_relations(votes)
    assert Relation("r1", "r2") in kept and Relation("r2", "r3") in kept
    assert resolve(kept).rank == {"r1": 1, "r2": 2, "r3": 3, "r4": 4}


def test_a_response_most_annotations_discard_leaves_the_prompt() -> None:
    votes = [
        ranked(["r1"], ["r2"], discarded=("r3",)),
        ranked(["r1"], ["r2"], discarded=("r3",)),
        ranked(["r3"], ["r1"], ["r2"]),  # one of three still ranked r3: outvoted
    ]
    assert dropped(votes) == frozenset({"r3"})
    assert all("r3" not in (r.better, r.worse) for r in kept_relations(votes))


def test_a_tie_of_votes_keeps_the_response_and_alone_a_discard_is_a_majority() -> None:
    split = [ranked(["r1"], ["r2"], discarded=("r3",)), ranked(["r3"], ["r1"])]
    assert dropped(split) == frozenset()  # one of two
    assert Relation("r3", "r1") in kept_relations(split)
    alone = [Vote([], frozenset({"r9"}), frozenset({"r9"}))]
    assert dropped(alone) == frozenset({"r9"})
