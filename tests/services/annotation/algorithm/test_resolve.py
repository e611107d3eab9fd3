"""Algorithm 1: hand-checked cases and properties (respect acyclic input, merge cycles, order-free)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from services.annotation.algorithm.resolve import Relation, relations_of_order, resolve


def test_chain_gives_distinct_ranks() -> None:
    result = resolve([Relation("a", "b"), Relation("b", "c")])
    assert result.rank == {"a": 1, "b": 2, "c": 3}
    assert (result.conflicts, result.merged_nodes, result.conflict_ratio) == (0, 0, 0.0)


def test_tie_shares_a_rank_without_conflict() -> None:
    result = resolve([Relation("a", "b", tie=True), Relation("a", "c")])
    assert result.rank == {"a": 1, "b": 1, "c": 2}
    assert result.conflicts == 0 and result.merged_nodes == 1


def test_cycle_is_merged_and_counted() -> None:
    relations = [Relation("a", "b"), Relation("b", "c"), Relation("c", "a"), Relation("c", "d")]
    result = resolve(relations)
    assert result.rank == {"a": 1, "b": 1, "c": 1, "d": 2}
    assert (result.relations, result.conflicts, result.merged_nodes) == (4, 3, 1)
    assert result.conflict_ratio == 0.75


def test_order_expands_to_pairwise_relations() -> None:
    relations = relations_of_order([["a"], ["c", "b"], ["d"]])
    assert set(relations) == {
        Relation("c", "b", tie=True),
        Relation("a", "c"),
        Relation("a", "b"),
        Relation("a", "d"),
        Relation("c", "d"),
        Relation("b", "d"),
    }
    assert resolve(relations).rank == {"a": 1, "b": 2, "c": 2, "d": 3}


def test_five_rounds_of_circular_triples_with_one_inconsistent_annotator() -> None:
    # true order r1 > r2 > r3 > r4 > r5; the (4,5,1) round puts r5 above r1
    triples = [
        [["r1"], ["r2"], ["r3"]],
        [["r2"], ["r3"], ["r4"]],
        [["r3"], ["r4"], ["r5"]],
        [["r5"], ["r4"], ["r1"]],
        [["r1"], ["r2"], ["r5"]],
    ]
    relations = [r for t in triples for r in relations_of_order(t)]
    result = resolve(relations)
    assert len({(min(r.better, r.worse), max(r.better, r.worse)) for r in relations}) == 10  # all pairs covered
    assert len(set(result.rank.values())) < 5 and result.conflicts > 0
    assert result.rank["r1"] == result.rank["r5"]  # the cycle r1 > ... > r5 > r1 is merged


# --- properties ---------------------------------------------------------------------------

IDS = [f"r{i}" for i in range(7)]


@st.composite
def consistent(draw: st.DrawFn) -> tuple[dict[str, int], list[Relation]]:
    """A hidden ranking with ties, and relations that never contradict it."""
    ids = draw(st.lists(st.sampled_from(IDS), min_size=2, max_size=7, unique=True))
    levels = {i: draw(st.integers(1, 4)) for i in ids}
    pairs = draw(
        st.lists(
            st.tuples(st.sampled_from(ids), st.sampled_from(ids)).filter(lambda p: p[0] != p[1]),
            min_size=1,
            max_size=15,
        )
    )
    relations = []
    for a, b in pairs:
        if levels[a] == levels[b]:
            relations.append(Relation(a, b, tie=True))
        else:
            relations.append(Relation(a, b) if levels[a] < levels[b] else Relation(b, a))
    return levels, relations


@settings(max_examples=300, deadline=None)
@given(consistent())
def test_acyclic_input_is_respected(case: tuple[dict[str, int], list[Relation]]) -> None:
    _, relations = case
    result = resolve(relations)
    assert result.conflicts == 0
    for r in relations:
        assert (
            (result.rank[r.better] == result.rank[r.worse]) if r.tie else (result.rank[r.better] < result.rank[r.worse])
        )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(IDS), st.sampled_from(IDS), st.booleans()).filter(lambda t: t[0] != t[1]),
        min_size=1,
        max_size=20,
    ),
    st.randoms(use_true_random=False),
)
def test_result_does_not_depend_on_annotation_order(raw: list[tuple[str, str, bool]], rng: random.Random) -> None:
    relations = [Relation(a, b, tie) for a, b, tie in raw]
    shuffled = rng.sample(relations, len(relations))
    assert resolve(shuffled) == resolve(relations)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(IDS), min_size=2, max_size=6, unique=True),
    st.lists(st.tuples(st.sampled_from(IDS), st.sampled_from(IDS)).filter(lambda p: p[0] != p[1]), max_size=10),
)
def test_responses_on_a_cycle_share_a_rank(cycle: list[str], extra: list[tuple[str, str]]) -> None:
    relations = [Relation(a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)]
    relations += [Relation(a, b) for a, b in extra]
    rank = resolve(relations).rank
    assert len({rank[i] for i in cycle}) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(IDS), st.sampled_from(IDS), st.booleans()).filter(lambda t: t[0] != t[1]),
        min_size=1,
        max_size=20,
    )
)
def test_ranking_is_a_consistent_partial_order(raw: list[tuple[str, str, bool]]) -> None:
    """Whatever the input, the output ranks are 1..k with no gaps, and a relation is broken only inside a merge."""
    result = resolve([Relation(a, b, tie) for a, b, tie in raw])
    assert sorted(set(result.rank.values())) == list(range(1, max(result.rank.values()) + 1))
    for a, b, tie in raw:
        if not tie and result.rank[a] > result.rank[b]:
            raise AssertionError(f"{a} > {b} reversed rather than merged")
