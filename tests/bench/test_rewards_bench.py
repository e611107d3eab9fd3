"""bench/rewards_bench.py: its options, and the plain baseline's rewards in input order. No timings asserted."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from rewards_bench import parse_args, plain_forward

from cheems.forward import forward_rewards
from trainer.tiny import build_model


def test_defaults_fit_two_cores_and_the_paper_size_is_an_option() -> None:
    args = parse_args([])
    assert (args.prompts, args.responses, args.old_prompts, args.rounds) == (100, 5, 20, 2)
    assert (args.device, args.dtype, args.max_batch_tokens, args.max_length) == ("cpu", "auto", 32768, 2048)
    assert parse_args(["--prompts", "2492", "--device", "cuda"]).prompts == 2492


def test_the_plain_baseline_gives_each_sequence_its_own_reward_in_order(tokenizer: Any) -> None:
    model = build_model(tokenizer, hidden_size=16, layers=1, heads=2, kv_heads=1).eval()
    sequences = [[5, 6, 7, 8, 9], [5, 6], [10, 11, 12], [7]]
    got = plain_forward(model, sequences, max_tokens=6, device="cpu")  # several batches, sorted by length
    with torch.no_grad():
        alone = [forward_rewards(model, [s]).item() for s in sequences]
    assert got == pytest.approx(alone, abs=1e-5)
