"""Double annotation, pure: which triples are doubled (a seeded hash of the task id, about `share` of them) and
how often the two annotations of a doubled triple agree, overall and per pair of annotators, on the relations
resolution counts (a discard is its annotator's vote, `algorithm.discards`)."""

from __future__ import annotations

import pytest

from services.annotation.algorithm.doubles import TARGET, DoublingConfig, compare, double_agreement, doubled
from services.annotation.algorithm.quality import Judgment
from services.annotation.algorithm.resolve import relations_of_order

IDS = [f"{n:064x}" for n in range(2000)]


def annotation(name: str, *order: list[str], discarded: frozenset[str] = frozenset()) -> Judgment:
    return Judgment(name, "human", "p1", tuple(relations_of_order(order)), discarded)


@pytest.mark.parametrize("share", [1.5, -0.1, float("nan"), "0.5", None])
def test_a_share_outside_zero_to_one_is_refused_naming_the_option(share: object) -> None:
    with pytest.raises(ValueError, match=r"double_share must be a number in \[0, 1\]"):
        DoublingConfig(share=share)  # type: ignore[arg-type]


def test_the_share_picks_about_that_many_triples_the_same_ones_every_time() -> None:
    assert not any(doubled(t, DoublingConfig()) for t in IDS)
    assert all(doubled(t, DoublingConfig(share=1.0)) for t in IDS)
    picked = [t for t in IDS if doubled(t, DoublingConfig(share=0.3, seed=7))]
    assert 0.25 < len(picked) / len(IDS) < 0.35
    assert picked == [t for t in IDS if doubled(t, DoublingConfig(share=0.3, seed=7))]
    other_seed = [t for t in IDS if doubled(t, DoublingConfig(share=0.3, seed=8))]
    assert other_seed != picked and 0.25 < len(other_seed) / len(IDS) < 0.35
    more = {t for t in IDS if doubled(t, DoublingConfig(share=0.6, seed=7))}
    assert set(picked) < more  # a larger share keeps the smaller one's triples


def test_pairs_agree_on_the_same_preference_or_both_a_tie() -> None:
    assert compare(annotation("甲", ["a"], ["b"], ["c"]), annotation("乙", ["a"], ["b"], ["c"])) == (3, 3)
    assert compare(annotation("甲", ["a"], ["b"], ["c"]), annotation("乙", ["c"], ["b"], ["a"])) == (3, 0)
    assert compare(annotation("甲", ["a", "b"], ["c"]), annotation("乙", ["b", "a"], ["c"])) == (3, 3)  # tie = tie
    assert compare(annotation("甲", ["a", "b"], ["c"]), annotation("乙", ["a"], ["b"], ["c"])) == (3, 2)  # tie != a>b
    # a response either one discarded is left out: only a vs c is compared
    assert compare(
        annotation("甲", ["a"], ["c"], discarded=frozenset({"b"})), annotation("乙", ["c"], ["b"], ["a"])
    ) == (
        1,
        0,
    )


def test_agreement_overall_and_per_pair_of_annotators() -> None:
    pairs = [
        (annotation("甲", ["a"], ["b"], ["c"]), annotation("乙", ["a"], ["b"], ["c"])),  # 3 of 3
        (annotation("乙", ["a"], ["b"], ["c"]), annotation("甲", ["b"], ["a"], ["c"])),  # 2 of 3, the same pair
        (annotation("丙", ["a", "b", "c"]), annotation("甲", ["a"], ["b"], ["c"])),  # 0 of 3
    ]
    figures = double_agreement(pairs, [j for pair in pairs for j in pair])
    assert (figures.triples, figures.compared, figures.agreeing) == (3, 9, 5)
    assert figures.agreement == pytest.approx(5 / 9) and figures.agreement < TARGET == 0.9
    assert list(figures.by_pair) == [("丙", "甲"), ("乙", "甲")]  # names sorted, whoever did which copy
    assert (figures.by_pair[("乙", "甲")].triples, figures.by_pair[("乙", "甲")].agreement) == (2, pytest.approx(5 / 6))
    assert figures.by_pair[("丙", "甲")].agreement == 0.0
    nothing = double_agreement([], [])
    assert (nothing.triples, nothing.compared, nothing.agreement, nothing.by_pair) == (0, 0, None, {})


def test_a_response_the_prompt_drops_leaves_the_agreement_as_it_leaves_the_ranking() -> None:
    first, second = annotation("甲", ["a"], ["b"], ["c"]), annotation("乙", ["c"], ["a"], ["b"])
    others = [annotation(name, ["a"], ["d"], discarded=frozenset({"c"})) for name in ("丙", "丁", "戊")]
    # c: seen by five annotations, discarded by three: dropped for the prompt (the old rule kept it here: neither
    # copy discarded it, so a > c and b > c were compared, and disagreed)
    figures = double_agreement([(first, second)], [first, second, *others])
    assert (figures.compared, figures.agreeing) == (1, 1)  # only a > b
    one_discard = double_agreement([(first, second)], [first, second, *others[:1]])
    assert (one_discard.compared, one_discard.agreeing) == (3, 1)  # one of three is no majority: c stays
