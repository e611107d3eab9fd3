"""Prefix sharing: the plan of packed rows (pure) and the packed forward, equal to the unpacked one in fp32."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from cheems import forward
from cheems.chat import Conversation, Truncation, encode_many
from cheems.forward import forward_rewards, score_in_groups, shared_rewards
from cheems.packing import Cost, Kernel, Row, common_prefix, kernel_for, lay_out, plan_rows
from trainer.tiny import build_model, build_tokenizer, tiny_config

CHEAP_ATTENTION = Cost(linear=1000.0, attention=1.0)  # packing pays as soon as anything is shared


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([5], [6]) == 0


def test_a_prompts_responses_share_one_row_and_strangers_stay_alone() -> None:
    prompt = [7, 8, 9, 10]
    seqs = [[*prompt, 1, 2], [3, 3, 3], [*prompt, 5], [*prompt, 1, 2, 6], [4]]
    rows = plan_rows(seqs, CHEAP_ATTENTION)
    assert sorted(i for r in rows for i in r.members) == list(range(len(seqs)))  # each exactly once
    shared = [r for r in rows if len(r.members) > 1]
    assert len(shared) == 1 and sorted(shared[0].members) == [0, 2, 3]
    assert shared[0].prefix == len(prompt)  # [prompt][1 2] and [prompt][1 2 6] share more, [prompt][5] does not
    assert shared[0].length(seqs) == 4 + 2 + 1 + 3


def test_every_member_keeps_its_last_token_out_of_the_prefix() -> None:
    seqs = [[1, 2, 3], [1, 2, 3], [1, 2, 3, 4], [1, 2]]  # identical, and prefixes of each other
    rows = plan_rows(seqs, CHEAP_ATTENTION)
    for row in rows:
        assert all(row.prefix < len(seqs[i]) for i in row.members)
    assert max(len(r.members) for r in rows) == 4 and rows[0].prefix == 1


def test_rows_stay_under_the_token_cap() -> None:
    seqs = [[1] * 50 + [i] * 30 for i in range(2, 12)]
    rows = plan_rows(seqs, CHEAP_ATTENTION, max_row_tokens=200)
    assert all(r.length(seqs) <= 200 for r in rows) and len(rows) > 1
    assert sorted(i for r in rows for i in r.members) == list(range(10))


def test_left_truncation_that_cut_differently_shares_nothing() -> None:
    full = [list(range(100, 200)) + [i] * n for i, n in ((1, 5), (2, 20), (3, 40))]
    cut = [s[-60:] for s in full]  # each lost a different part of the prompt
    assert all(len(r.members) == 1 for r in plan_rows(cut, CHEAP_ATTENTION))


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return build_tokenizer()


def test_the_cost_model_packs_rlhf_shapes_and_leaves_long_responses_alone(tokenizer: Any) -> None:
    rng = random.Random(0)
    cost = Cost.of(tiny_config(tokenizer, hidden_size=64, layers=2))

    def shape(prompt: int, n: int, response: int) -> list[list[int]]:
        p = [rng.randrange(100, 2000) for _ in range(prompt)]
        return [p + [rng.randrange(100, 2000) for _ in range(response)] for _ in range(n)]

    assert [len(r.members) for r in plan_rows(shape(1000, 8, 40), cost)] == [8]  # RLHF-like: one row
    assert [len(r.members) for r in plan_rows(shape(100, 5, 400), cost)] == [1] * 5  # CheemsBench-like: apart


def test_a_row_laid_out_holds_each_sequence_at_its_own_positions() -> None:
    seqs = [[9, 8, 7, 1], [9, 8, 7, 2, 3], [9, 8, 7, 4, 5, 6]]
    packed = lay_out(Row(3, (0, 1, 2)), seqs)
    assert packed.input_ids == [9, 8, 7, 1, 2, 3, 4, 5, 6]
    assert packed.positions == [0, 1, 2, 3, 3, 4, 3, 4, 5]
    assert packed.segments == [0, 0, 0, 1, 2, 2, 3, 3, 3]
    assert packed.reads == [3, 5, 8]
    for k, i in enumerate((0, 1, 2), start=1):  # prefix + own tokens == the sequence, read at its last token
        own = [t for t, s in zip(packed.input_ids, packed.segments, strict=True) if s in (0, k)]
        assert own == seqs[i] and packed.input_ids[packed.reads[k - 1]] == seqs[i][-1]


def random_batch(rng: random.Random) -> list[list[int]]:
    """Several prompts (some long, some of one token) with 1-6 responses each, shuffled together; some
    responses identical, some prefixes of others."""
    seqs: list[list[int]] = []
    for _ in range(rng.randrange(1, 5)):
        prompt = [rng.randrange(100, 3000) for _ in range(rng.choice([1, 5, 40, 300]))]
        responses = [
            [rng.randrange(100, 3000) for _ in range(rng.randrange(1, 60))] for _ in range(rng.randrange(1, 7))
        ]
        if len(responses) > 1 and rng.random() < 0.5:
            responses.append(list(responses[0]))
        if rng.random() < 0.5:
            responses.append(responses[0] + [rng.randrange(100, 3000)])
        seqs += [prompt + r for r in responses]
    rng.shuffle(seqs)
    return seqs


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request: pytest.FixtureRequest, tokenizer: Any) -> Iterator[Any]:
    model = build_model(tokenizer, hidden_size=64, layers=2, seed=1)
    model.config._attn_implementation = request.param
    yield model.eval()


def test_packed_scores_equal_unpacked_scores_over_many_shapes(model: Any) -> None:
    rng = random.Random(7)
    packed_some = 0
    for _ in range(12):
        seqs = random_batch(rng)
        packed_some += any(len(r.members) > 1 for r in plan_rows(seqs, Cost.of(model.config)))
        plain = score_in_groups(model, seqs, 64, "cpu")
        shared = score_in_groups(model, seqs, 64, "cpu", share=True)
        assert shared == pytest.approx(plain, abs=1e-4)
        assert shared != pytest.approx([0.0] * len(shared), abs=1e-3)  # real values, not a constant
    assert packed_some >= 10  # the comparison really went through packed rows


def test_packed_rows_batched_with_padding_score_as_alone(model: Any) -> None:
    rng = random.Random(3)
    seqs = random_batch(rng) + random_batch(rng)
    rows = [r for r in plan_rows(seqs, CHEAP_ATTENTION)]
    with torch.no_grad():
        values = forward.packed_rewards(model, seqs, rows, "cpu").tolist()  # every row in one padded batch
        alone = [forward.packed_rewards(model, seqs, [r], "cpu").tolist() for r in rows]
    assert values == pytest.approx([v for a in alone for v in a], abs=1e-4)
    expected = score_in_groups(model, seqs, 64, "cpu")
    assert values == pytest.approx([expected[i] for r in rows for i in r.members], abs=1e-4)


def test_packed_gradients_equal_unpacked_gradients(tokenizer: Any) -> None:
    model = build_model(tokenizer, hidden_size=64, layers=2, seed=2).train()
    rng = random.Random(11)
    for _ in range(3):
        seqs = random_batch(rng)
        weights = torch.randn(len(seqs))

        def gradients(rewards_of: Any, seqs: list[list[int]] = seqs, weights: torch.Tensor = weights) -> list[Any]:
            model.zero_grad()
            (rewards_of(model, seqs) * weights).sum().backward()
            return [p.grad.clone() for p in model.parameters()]

        for plain, shared in zip(gradients(forward_rewards), gradients(shared_rewards), strict=True):
            torch.testing.assert_close(shared, plain, atol=1e-4, rtol=1e-4)


def test_a_model_that_cannot_take_the_mask_is_scored_unpacked(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seqs = random_batch(random.Random(5))
    expected = score_in_groups(model, seqs, 64, "cpu")
    monkeypatch.setattr(forward, "SHARING_ATTENTION", set())

    def refuse(*_: Any) -> None:
        raise AssertionError("packed forward used")

    monkeypatch.setattr(forward, "packed_rewards", refuse)
    assert score_in_groups(model, seqs, 64, "cpu", share=True) == pytest.approx(expected, abs=1e-6)
    with torch.no_grad():
        assert shared_rewards(model, seqs).tolist() == pytest.approx(expected, abs=1e-4)


def test_real_conversations_with_system_prompts_and_history_share_their_rendered_prompt(tokenizer: Any) -> None:
    history = (("user", "先说说天气。"), ("assistant", "今天晴。"))
    system = "你是一个乐于助人的助手。" * 20
    conversations = [
        Conversation("请解释一下递归。", r, system, history) for r in ("递归就是……", "不知道", "函数调用自身。")
    ]
    encoded = [e.input_ids for e in encode_many(tokenizer, conversations, 2048, Truncation.NONE)]
    rows = plan_rows(encoded, CHEAP_ATTENTION)
    assert len(rows) == 1 and rows[0].prefix > 60  # the system prompt, history and question, once
    model = build_model(tokenizer, hidden_size=64, layers=2, seed=3).eval()
    assert score_in_groups(model, encoded, 64, "cpu", share=True) == pytest.approx(
        score_in_groups(model, encoded, 64, "cpu"), abs=1e-4
    )


QWEN25_05B = {"hidden_size": 896, "layers": 24, "heads": 14, "kv_heads": 2, "intermediate": 4864}


@pytest.mark.parametrize(
    ("device", "attention", "cheemsbench_packed"),
    [
        ("cuda", "sdpa", False),  # a dense mask keeps SDPA off its fast kernels: long responses stay apart
        ("cuda", "flex_attention", True),  # a block mask pays the visible cells only
        ("cuda:1", "sdpa", False),
        ("cpu", "eager", False),
    ],
)
def test_the_cost_model_knows_the_kernel_and_the_device(
    tokenizer: Any, device: str, attention: str, cheemsbench_packed: bool
) -> None:
    cost = Cost.of(tiny_config(tokenizer, **QWEN25_05B), attention, device)
    rng = random.Random(1)

    def shape(prompt: int, n: int, response: int) -> list[list[int]]:
        p = [rng.randrange(100, 2000) for _ in range(prompt)]
        return [p + [rng.randrange(100, 2000) for _ in range(response)] for _ in range(n)]

    assert [len(r.members) for r in plan_rows(shape(1000, 8, 40), cost)] == [8]  # RLHF-like: packed everywhere
    expected = [5] if cheemsbench_packed else [1] * 5
    assert [len(r.members) for r in plan_rows(shape(150, 5, 400), cost)] == expected  # CheemsBench-like


def test_an_unpacked_row_is_priced_causal_and_a_packed_one_by_its_mask() -> None:
    dense = Cost(linear=0.0, attention=1.0, kernel=Kernel(causal=1.0, packed=1.0))
    assert dense.alone(4) == 10  # 4 x 5 / 2 cells
    assert dense.packed(2, [1, 1]) == 16  # all 4 x 4
    sparse = Cost(linear=0.0, attention=1.0, kernel=Kernel(causal=1.0, packed=1.0, sparse=True))
    assert sparse.packed(2, [1, 1]) == 3 + 2 * (2 + 1)  # the prefix's triangle, each member's prefix and self
    assert kernel_for("flash_attention_2", "cuda") == kernel_for("sdpa", "cuda")  # packs nothing anyway
