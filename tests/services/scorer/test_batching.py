"""Triton requests: length buckets, at most max_rows each, and the sequences of one prompt kept together."""

from __future__ import annotations

import random

from services.scorer.batching import bucket_length, requests


def test_without_groups_each_sequence_goes_to_its_bucket() -> None:
    assert requests([10, 600, 30, 512, 513], max_rows=64) == [(512, [0, 2, 3]), (1024, [1, 4])]
    assert requests([10] * 5, max_rows=2) == [(512, [0, 1]), (512, [2, 3]), (512, [4])]
    assert requests([], max_rows=4) == []


def test_a_group_goes_whole_into_the_bucket_of_its_longest_member() -> None:
    # one prompt's responses across the 512 boundary: apart by bucket, they would be computed apart
    assert requests([500, 540, 20], max_rows=64, together=[[0, 1]]) == [(512, [2]), (1024, [0, 1])]


def test_a_group_is_not_cut_by_a_request_unless_it_alone_is_larger() -> None:
    got = requests([10] * 7, max_rows=4, together=[[0, 1], [2, 3, 4], [5, 6]])
    assert got == [(512, [0, 1]), (512, [2, 3, 4]), (512, [5, 6])]
    assert requests([10] * 5, max_rows=2, together=[[0, 1, 2, 3, 4]]) == [(512, [0, 1]), (512, [2, 3]), (512, [4])]


def test_every_index_once_within_the_limits() -> None:
    rng = random.Random(7)
    for _ in range(200):
        lengths = [rng.randint(1, 2000) for _ in range(rng.randint(1, 60))]
        order = list(range(len(lengths)))
        rng.shuffle(order)
        together, start = [], 0
        while start < len(order):
            size = rng.randint(1, 6)
            together.append(order[start : start + size])
            start += size
        max_rows = rng.randint(1, 8)
        got = requests(lengths, max_rows, together)
        assert sorted(i for _, members in got for i in members) == list(range(len(lengths)))
        for padded, members in got:
            assert 1 <= len(members) <= max_rows
            assert all(lengths[i] <= padded for i in members)
        for group in together:  # whole in one request when it fits, all in one bucket anyway
            homes = [k for k, (_, members) in enumerate(got) if set(group) & set(members)]
            assert len({got[k][0] for k in homes}) == 1
            assert got[homes[0]][0] == bucket_length(max(lengths[i] for i in group))
            if len(group) <= max_rows:
                assert len(homes) == 1
