"""The forward under FlexAttention (CPU, no gradients): packed rows through a BlockMask, end to end in one row,
give the rewards of the dense-mask rows and of every sequence alone."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from cheems.forward import forward_rewards, packed_rewards, score_in_groups, shared_rewards, to_device
from cheems.packing import plan_rows
from tests.cheems.test_packing import CHEAP_ATTENTION, random_batch
from trainer.tiny import build_model, build_tokenizer


@pytest.fixture(scope="module")
def models() -> Iterator[tuple[Any, Any]]:
    """(sdpa, flex_attention) twins with the same weights; FlexAttention's first call compiles (seconds), once."""
    tokenizer = build_tokenizer()
    plain = build_model(tokenizer, hidden_size=64, layers=2, seed=1).eval()
    flex = build_model(tokenizer, hidden_size=64, layers=2, seed=1).eval()
    flex.set_attn_implementation("flex_attention")
    assert plain.config._attn_implementation == "sdpa" and flex.config._attn_implementation == "flex_attention"
    with torch.no_grad():
        yield plain, flex


def test_block_mask_rows_equal_dense_rows_equal_every_sequence_alone(models: tuple[Any, Any]) -> None:
    plain, flex = models
    rng = random.Random(7)
    for _ in range(4):
        seqs = random_batch(rng)
        rows = plan_rows(seqs, CHEAP_ATTENTION)
        alone = score_in_groups(plain, seqs, 64, "cpu")
        dense = packed_rewards(plain, seqs, rows, "cpu").tolist()
        blocks = packed_rewards(flex, seqs, rows, "cpu").tolist()
        assert blocks == pytest.approx(dense, abs=1e-4)
        assert blocks == pytest.approx([alone[i] for r in rows for i in r.members], abs=1e-4)


def test_scoring_and_the_training_forward_under_flex_equal_the_unshared_forward(models: tuple[Any, Any]) -> None:
    plain, flex = models
    seqs = random_batch(random.Random(3)) + random_batch(random.Random(4))
    expected = forward_rewards(plain, seqs).tolist()
    assert forward_rewards(flex, seqs).tolist() == pytest.approx(expected, abs=1e-4)  # end to end, one row
    assert score_in_groups(flex, seqs, 4, "cpu", share=True) == pytest.approx(expected, abs=1e-4)
    assert shared_rewards(flex, seqs).tolist() == pytest.approx(expected, abs=1e-4)


def test_on_the_cpu_the_tensor_comes_back_unchanged() -> None:
    ids = torch.arange(6).reshape(2, 3)
    out = to_device(ids, "cpu")
    assert out.device.type == "cpu" and torch.equal(out, ids)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU host's check)")
def test_on_cuda_the_copy_arrives_intact() -> None:
    ids = torch.arange(1000).reshape(10, 100)
    out = to_device(ids, "cuda")
    assert out.device.type == "cuda" and torch.equal(out.cpu(), ids)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (FlexAttention has no CPU backward)")
def test_flex_packed_gradients_equal_the_unshared_gradients_on_cuda() -> None:
    """The trainer's path on a GPU: packed rows through a BlockMask, backward included, against every sequence
    alone through SDPA; float32, so the tolerance is the one the CPU tests use."""
    tokenizer = build_tokenizer()
    plain = build_model(tokenizer, hidden_size=64, layers=2, seed=2).cuda().train()
    flex = build_model(tokenizer, hidden_size=64, layers=2, seed=2).cuda().train()
    flex.set_attn_implementation("flex_attention")
    seqs = random_batch(random.Random(5)) + random_batch(random.Random(6))
    weights = torch.linspace(-1.0, 1.0, len(seqs), device="cuda")
    (forward_rewards(plain, seqs, "cuda") * weights).sum().backward()
    shared = shared_rewards(flex, seqs, "cuda")
    assert shared.tolist() == pytest.approx(forward_rewards(plain, seqs, "cuda").tolist(), abs=1e-4)
    (shared * weights).sum().backward()
    for (name, a), (_, b) in zip(plain.named_parameters(), flex.named_parameters(), strict=True):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-4, msg=name)
