"""Greedy sample-based batching: coverage, batch sizes, prompt groups kept together, determinism."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.sampler import SamplerConfig, _greedy, epoch_batches, pairs_in_batch, shard

Groups = list[list[int]]
Pairs = list[list[tuple[int, int]]]


@st.composite
def grouped(draw: st.DrawFn, max_groups: int = 12) -> tuple[Groups, Pairs]:
    """Prompt groups of consecutive example ids (sizes 1..7) with random pairs inside each group."""
    sizes = draw(st.lists(st.integers(1, 7), min_size=0, max_size=max_groups))
    groups: Groups = []
    pairs: Pairs = []
    start = 0
    for size in sizes:
        members = list(range(start, start + size))
        start += size
        groups.append(members)
        if size < 2:
            pairs.append([])
            continue
        offsets = draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, size - 2)), max_size=8))
        distinct = {(a, b if b < a else b + 1): None for a, b in offsets}  # b skips a: never a self-pair
        pairs.append([(members[a], members[b]) for a, b in distinct])
    return groups, pairs


configs = st.builds(SamplerConfig, batch_size=st.integers(1, 12), seed=st.integers(0, 2**16), shuffle=st.booleans())
epochs = st.integers(0, 50)


def runs(batches: list[list[int]], groups: Groups) -> list[tuple[int, int, int]]:
    """(group, start position, end position) of each group's run in the flattened batches.

    Asserts that every group occupies one contiguous run: the rest of a split prompt carries over.
    """
    flat = [x for b in batches for x in b]
    owner = {x: g for g, members in enumerate(groups) for x in members}
    out: list[tuple[int, int, int]] = []
    for pos, x in enumerate(flat):
        g = owner[x]
        if out and out[-1][0] == g:
            out[-1] = (g, out[-1][1], pos + 1)
        else:
            out.append((g, pos, pos + 1))
    assert sorted(g for g, _, _ in out) == list(range(len(groups))), "a prompt group was interleaved"
    return out


def batch_of(batches: list[list[int]]) -> dict[int, int]:
    return {x: i for i, b in enumerate(batches) for x in b}


@given(grouped(), configs, epochs)
@settings(max_examples=200, deadline=None)
def test_every_example_appears_exactly_once_per_epoch(
    data: tuple[Groups, Pairs], config: SamplerConfig, epoch: int
) -> None:
    groups, pairs = data
    flat = [x for b in epoch_batches(groups, pairs, config, epoch) for x in b]
    assert sorted(flat) == [x for g in groups for x in g]
    assert len(flat) == len(set(flat))


@given(grouped(), configs, epochs)
@settings(max_examples=200, deadline=None)
def test_batches_are_full_but_the_last_and_never_exceed_batch_size(
    data: tuple[Groups, Pairs], config: SamplerConfig, epoch: int
) -> None:
    groups, pairs = data
    batches = epoch_batches(groups, pairs, config, epoch)
    total = sum(len(g) for g in groups)
    assert len(batches) == -(-total // config.batch_size)
    assert all(len(b) == config.batch_size for b in batches[:-1])
    if batches:
        assert 1 <= len(batches[-1]) <= config.batch_size


@given(grouped(), configs, epochs)
@settings(max_examples=200, deadline=None)
def test_a_group_that_fits_in_the_room_left_stays_in_one_batch(
    data: tuple[Groups, Pairs], config: SamplerConfig, epoch: int
) -> None:
    groups, pairs = data
    batches = epoch_batches(groups, pairs, config, epoch)
    where = batch_of(batches)
    size = config.batch_size
    for g, start, end in runs(batches, groups):
        assert end - start == len(groups[g])
        room = size - start % size  # every batch before is exactly full
        if len(groups[g]) <= room:
            assert {where[x] for x in groups[g]} == {start // size}
        else:
            # split: the first part fills the room, and with room for two a whole pair goes first
            first = [x for x in groups[g] if where[x] == start // size]
            assert len(first) == room
            if room >= 2 and pairs[g]:
                assert any(a in first and b in first for a, b in pairs[g])


@given(grouped(), st.integers(0, 2**16), epochs, st.booleans())
@settings(max_examples=200, deadline=None)
def test_a_batch_holding_everything_splits_no_group(
    data: tuple[Groups, Pairs], seed: int, epoch: int, shuffle: bool
) -> None:
    groups, pairs = data
    total = sum(len(g) for g in groups)
    config = SamplerConfig(batch_size=max(1, total) + random.Random(seed).randrange(3), seed=seed, shuffle=shuffle)
    batches = epoch_batches(groups, pairs, config, epoch)
    assert len(batches) == (1 if total else 0)
    if total:
        assert sorted(batches[0]) == list(range(total))
        found = pairs_in_batch(batches[0], pairs, [g for g, m in enumerate(groups) for _ in m])
        assert len(found) == sum(len(p) for p in pairs)


@given(grouped(), st.integers(7, 12), st.integers(0, 2**16), epochs)
@settings(max_examples=200, deadline=None)
def test_with_batch_at_least_the_largest_group_unsplit_groups_keep_all_pairs(
    data: tuple[Groups, Pairs], batch_size: int, seed: int, epoch: int
) -> None:
    groups, pairs = data
    batches = epoch_batches(groups, pairs, SamplerConfig(batch_size, seed), epoch)
    where = batch_of(batches)
    split = [g for g, m in enumerate(groups) if len({where[x] for x in m}) > 1]
    for g in range(len(groups)):
        if g not in split:
            assert all(where[a] == where[b] for a, b in pairs[g])
    # a group no larger than a batch is split at most once, so there are fewer splits than batches
    assert len(split) <= max(0, len(batches) - 1)
    assert all(len({where[x] for x in groups[g]}) == 2 for g in split)


@given(grouped(), configs, epochs)
@settings(max_examples=200, deadline=None)
def test_same_seed_and_epoch_give_the_same_batches(
    data: tuple[Groups, Pairs], config: SamplerConfig, epoch: int
) -> None:
    groups, pairs = data
    assert epoch_batches(groups, pairs, config, epoch) == epoch_batches(groups, pairs, config, epoch)


def test_different_epochs_and_seeds_give_different_orders() -> None:
    groups = [[3 * i, 3 * i + 1, 3 * i + 2] for i in range(40)]
    pairs = [[(m[0], m[1]), (m[0], m[2])] for m in groups]
    config = SamplerConfig(batch_size=6, seed=7)
    orders = {tuple(x for b in epoch_batches(groups, pairs, config, e) for x in b) for e in range(5)}
    assert len(orders) == 5
    other_seed = epoch_batches(groups, pairs, SamplerConfig(batch_size=6, seed=8), 0)
    assert other_seed != epoch_batches(groups, pairs, config, 0)
    # shuffling is by prompt: with batch 6 and groups of 3, every batch is two whole prompts
    for e in range(5):
        for batch in epoch_batches(groups, pairs, config, e):
            assert {x // 3 for x in batch} == {batch[0] // 3, batch[3] // 3}


@given(grouped(), st.integers(1, 12), st.integers(0, 2**16), epochs)
@settings(max_examples=200, deadline=None)
def test_without_shuffle_groups_keep_their_order(
    data: tuple[Groups, Pairs], batch_size: int, seed: int, epoch: int
) -> None:
    groups, pairs = data
    config = SamplerConfig(batch_size, seed, shuffle=False)
    batches = epoch_batches(groups, pairs, config, epoch)
    assert [g for g, _, _ in runs(batches, groups)] == list(range(len(groups)))
    assert batches == epoch_batches(groups, pairs, SamplerConfig(batch_size, seed + 1, shuffle=False), epoch + 1)


def test_without_shuffle_and_no_split_batches_are_the_groups_in_order() -> None:
    groups = [[0, 1], [2, 3, 4], [5], [6, 7]]
    pairs = [[(0, 1)], [(2, 3), (4, 3)], [], [(7, 6)]]
    batches = epoch_batches(groups, pairs, SamplerConfig(batch_size=4, shuffle=False), 0)
    # [0,1] + [2,3,4] does not fit: 2 responses of the second prompt join the first batch, a pair first
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_split_prefers_whole_pairs() -> None:
    groups = [[0, 1, 2, 3, 4, 5]]
    pairs = [[(0, 5), (1, 4)]]
    batches = epoch_batches(groups, pairs, SamplerConfig(batch_size=4, shuffle=False), 0)
    assert batches[0][:4] == [0, 5, 1, 4]
    assert batches[1] == [2, 3]


def test_greedy_takes_at_most_room_and_only_from_left() -> None:
    left = [10, 11, 12, 13, 14]
    pairs = [(10, 11), (12, 13), (13, 14), (12, 99)]
    taken = _greedy(left, pairs, 3)
    assert len(taken) == 3 and len(set(taken)) == 3 and set(taken) <= set(left)
    assert taken[:2] == [10, 11]


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        SamplerConfig(batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        SamplerConfig(batch_size=-3)


def test_empty_dataset_has_no_batches() -> None:
    assert epoch_batches([], [], SamplerConfig(4), 0) == []


# --- shard -------------------------------------------------------------------------------------


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("length", range(10))
def test_shards_concatenate_to_the_batch(world_size: int, length: int) -> None:
    batch = [100 + 7 * i for i in range(length)]
    parts = [shard(batch, r, world_size) for r in range(world_size)]
    assert [x for p in parts for x in p] == batch
    per = -(-length // world_size)
    assert all(len(p) <= per for p in parts)
    assert [len(p) for p in parts] == sorted((len(p) for p in parts), reverse=True)


def test_shard_of_an_even_batch_is_even() -> None:
    assert [shard(list(range(8)), r, 4) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [shard([1, 2, 3], r, 4) for r in range(4)] == [[1], [2], [3], []]


# --- pairs_in_batch ----------------------------------------------------------------------------


@given(grouped(), st.randoms(use_true_random=False))
@settings(max_examples=200, deadline=None)
def test_pairs_in_batch_are_exactly_the_pairs_held_by_the_batch(data: tuple[Groups, Pairs], rnd: random.Random) -> None:
    groups, pairs = data
    group_of = [g for g, m in enumerate(groups) for _ in m]
    everything = list(range(len(group_of)))
    batch = rnd.sample(everything, rnd.randint(0, len(everything)))
    found = pairs_in_batch(batch, pairs, group_of)
    inside = set(batch)
    expected = [(a, b) for ps in pairs for a, b in ps if a in inside and b in inside]
    assert sorted((batch[i], batch[j]) for i, j in found) == sorted(expected)
    assert all(0 <= i < len(batch) and 0 <= j < len(batch) for i, j in found)


def test_pairs_in_batch_gives_positions_chosen_first() -> None:
    pairs = [[(2, 0), (1, 0)], [(3, 4)]]
    group_of = [0, 0, 0, 1, 1]
    assert sorted(pairs_in_batch([4, 0, 2, 3], pairs, group_of)) == [(2, 1), (3, 0)]
    assert pairs_in_batch([1, 3], pairs, group_of) == []
    assert pairs_in_batch([], pairs, group_of) == []


def test_a_split_prompt_fills_the_last_slot_without_breaking_a_pair() -> None:
    """With one slot left, take the response whose move splits no pair (5), not one of the pair (3, 4)."""
    batches = epoch_batches([[0, 1, 2], [3, 4, 5]], [[(0, 1)], [(3, 4)]], SamplerConfig(4, shuffle=False), 0)
    assert batches == [[0, 1, 2, 5], [3, 4]]
