"""Conformance with TRL: its real GRPOTrainer trains a tiny causal LM for two steps on CPU, rewarded by
`RewardClient.reward_function()` through the production path (gRPC -> Triton -> the tiny RM).

Both of TRL's dataset formats: plain (a "prompt" string column) and conversational (message lists).
"""

from __future__ import annotations

import math
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from services.scorer.client import RewardClient
from services.scorer.runtime import ScorerServer

# transformers 5 renames gradient checkpointing; TRL 1.16 still calls the old names
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:.*gradient_checkpointing:FutureWarning:transformers"),
]
NUM_GENERATIONS, STEPS = 4, 2
PLAIN = ["写一句关于春天的诗。", "介绍一下长城。"]
CONVERSATIONAL = [
    [{"role": "system", "content": "请简短回答。"}, {"role": "user", "content": PLAIN[0]}],
    [
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "你好！有什么可以帮你？"},
        {"role": "user", "content": PLAIN[1]},
    ],
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from trainer.tiny import build_tokenizer

    return build_tokenizer()


def batch_calls(server: ScorerServer) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/metrics", timeout=10) as reply:
        lines = reply.read().decode().splitlines()
    wanted = 'cheems_scorer_requests_total{api="ScoreBatch",'  # any model_id
    return sum(float(line.split()[-1]) for line in lines if line.startswith(wanted) and 'status="OK"' in line)


def train(prompts: list[Any], reward: Any, tokenizer: Any, out: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two GRPO steps of a tiny Qwen2 causal LM (real vocabulary, random weights); returns the trainer."""
    import torch
    from datasets import Dataset
    from transformers import Qwen2ForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from trainer.tiny import tiny_config

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(tiny_config(tokenizer, hidden_size=32, layers=1))
    args = GRPOConfig(
        output_dir=str(out),
        max_steps=STEPS,
        per_device_train_batch_size=NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=8,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
    )
    dataset = Dataset.from_dict({"prompt": prompts})
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.train()
    return trainer


@pytest.mark.parametrize("dataset", [PLAIN, CONVERSATIONAL], ids=["plain", "conversational"])
def test_grpo_trainer_with_our_reward_function(
    dataset: list[Any],
    triton_server: ScorerServer,
    tokenizer: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[list[Any], list[Any], list[float | None], set[str]]] = []
    with RewardClient(f"127.0.0.1:{triton_server.grpc_port}") as client:
        cheems_reward = client.reward_function()

        def recorded(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
            scores = cheems_reward(prompts=prompts, completions=completions, **kwargs)
            calls.append((prompts, completions, scores, set(kwargs)))
            return scores

        recorded.__name__ = cheems_reward.__name__
        before = batch_calls(triton_server)
        trainer = train(dataset, recorded, tokenizer, tmp_path, monkeypatch)

    assert len(calls) == STEPS  # one prompt and its generations per step; each prompt once in the epoch
    assert sorted(str(call[0][0]) for call in calls) == sorted(str(p) for p in dataset)
    for seen, completions, scores, kwargs in calls:
        assert seen == [seen[0]] * NUM_GENERATIONS
        assert len(completions) == len(scores) == NUM_GENERATIONS
        assert all(isinstance(s, float) and math.isfinite(s) for s in scores)
        assert {"completion_ids", "trainer_state"} <= kwargs
        assert all(isinstance(c, list) == isinstance(dataset[0], list) for c in completions)
    assert batch_calls(triton_server) - before == STEPS  # one prompt per step: one ScoreBatch each
    logged = [e for e in trainer.state.log_history if "rewards/cheems_reward/mean" in e]
    assert len(logged) == STEPS and all(math.isfinite(e["rewards/cheems_reward/mean"]) for e in logged)
