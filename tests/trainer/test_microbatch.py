"""Token-budget micro-batches: whole prompts per slot, every response once, the budget held, ranks padded."""

from __future__ import annotations

import random

import pytest

from trainer.microbatch import Budget, Forward, layout_tokens, shared_prefixes, split_step
from trainer.sampler import shard


def prompts(sizes: list[int], lengths: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(step ids in prompt order, group of each id, length of each id) for prompts of `sizes` responses."""
    group_of = [g for g, n in enumerate(sizes) for _ in range(n)]
    return list(range(len(group_of))), group_of, lengths[: len(group_of)]


def padded(lengths: list[int]):  # type: ignore[no-untyped-def]
    return lambda ids: len(ids) * max(lengths[x] for x in ids) if ids else 0


def test_whole_prompts_fill_slots_in_order_and_a_prompt_that_does_not_fit_starts_the_next() -> None:
    step, group_of, lengths = prompts([2, 3, 2], [10] * 7)
    forwards = split_step(step, group_of, 1, Budget(responses=8, tokens=50), padded(lengths))
    assert [f.slots for f in forwards] == [((0, 1, 2, 3, 4),), ((5, 6),)]  # 5 x 10 fits 50, a sixth would not


def test_a_prompt_bigger_than_an_empty_slot_is_cut_and_every_response_appears_once() -> None:
    step, group_of, lengths = prompts([6], [30, 10, 10, 10, 10, 10])
    forwards = split_step(step, group_of, 1, Budget(responses=8, tokens=64), padded(lengths))
    slots = [s for f in forwards for s in f.slots]
    assert sorted(x for s in slots for x in s) == step
    assert all(padded(lengths)(s) <= 64 for s in slots)
    assert slots == [(0, 1), (2, 3, 4, 5)]  # 2 x 30 fits, 3 x 30 would not; the rest (4 x 10) fits one slot


def test_the_response_cap_holds_under_a_large_token_budget() -> None:
    step, group_of, lengths = prompts([5, 5], [4] * 10)
    forwards = split_step(step, group_of, 1, Budget(responses=3, tokens=10_000), padded(lengths))
    assert all(len(s) <= 3 for f in forwards for s in f.slots)
    assert sorted(x for f in forwards for x in f.ids) == step


@pytest.mark.parametrize("seed", range(20))
def test_random_steps_keep_the_budget_and_lose_nothing(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(1, 6) for _ in range(rng.randint(1, 12))]
    lengths = [rng.randint(1, 100) for _ in range(sum(sizes))]
    step, group_of, _ = prompts(sizes, lengths)
    budget = Budget(responses=rng.randint(1, 10), tokens=rng.randint(100, 400))
    world = rng.randint(1, 3)
    prefixes = [rng.randint(0, 1) for _ in sizes]
    measure = layout_tokens(lengths, group_of, prefixes, [rng.random() < 0.5 for _ in sizes], rng.random() < 0.5)
    forwards = split_step(step, group_of, world, budget, measure)
    assert [x for f in forwards for x in f.ids] == step  # in order, each once
    for f in forwards:
        assert len(f.slots) == world
        for slot in f.slots:
            assert len(slot) <= budget.responses
            assert measure(slot) <= budget.tokens or len(slot) == 1


def test_a_last_forward_short_of_slots_gives_the_other_ranks_none() -> None:
    step, group_of, lengths = prompts([2, 2, 2], [5] * 6)
    forwards = split_step(step, group_of, 2, Budget(responses=2), padded(lengths))
    assert [f.slots for f in forwards] == [((0, 1), (2, 3)), ((4, 5), ())]
    assert forwards[1].counts == [2, 0] and forwards[1].ids == [4, 5]


def test_no_token_budget_means_the_response_cap_alone() -> None:
    step, group_of, lengths = prompts([3, 3], [1000] * 6)
    assert [f.slots for f in split_step(step, group_of, 1, Budget(responses=6), padded(lengths))] == [
        ((0, 1, 2, 3, 4, 5),)
    ]


def test_even_forwards_are_the_samplers_shards() -> None:
    batch = list(range(7))
    assert Forward.even(batch, 3).slots == tuple(tuple(shard(batch, r, 3)) for r in range(3))


def test_layout_tokens_count_the_rows_the_planner_makes_padded_or_end_to_end() -> None:
    lengths = [100, 10, 12, 50]
    group_of = [0, 0, 0, 1]
    prefixes = [8, 0]
    plain = layout_tokens(lengths, group_of, prefixes, None)  # sharing off: a row per response, padded
    assert plain([1, 2]) == 2 * 12
    assert plain([0, 1, 2, 3]) == 4 * 100
    packed = layout_tokens(lengths, group_of, prefixes, [True, False])  # prompt 0 packed: 8 + 92 + 2 + 4 = 106
    assert packed([0, 1, 2]) == 106
    assert packed([1, 2]) == 8 + 2 + 4
    assert packed([0, 1, 2, 3]) == 2 * 106  # its row and response 3's, padded to the longer
    apart = layout_tokens(lengths, group_of, prefixes, [False, False])  # the planner keeps prompt 0 apart
    assert apart([0, 1, 2]) == plain([0, 1, 2]) == 3 * 100
    flat = layout_tokens(lengths, group_of, prefixes, [True, False], padded=False)  # FlexAttention: end to end
    assert flat([0, 1, 2, 3]) == 106 + 50
    assert plain([]) == packed([]) == flat([]) == 0


def test_shared_prefixes_are_common_to_all_responses_and_leave_each_its_last_token() -> None:
    sequences = [[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 9], [7, 8], [7, 8]]
    assert shared_prefixes(sequences, [[0, 1, 2], [3, 4], []]) == [2, 1, 0]


def test_a_budget_needs_a_response_and_no_negative_tokens() -> None:
    with pytest.raises(ValueError, match="responses >= 1"):
        Budget(0)
    with pytest.raises(ValueError, match="tokens >= 0"):
        Budget(1, -1)
