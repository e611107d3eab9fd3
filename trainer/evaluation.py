"""Score CheemsBench files with the model being trained and compute the evaluator's metrics.

    result = evaluate_model(model, tokenizer, ["open.jsonl", "human.jsonl"], world, max_length=2048)

Every rank scores an equal share (FSDP needs every rank in every forward); results are gathered
and all ranks return the same EvalResult, computed by the evaluator's one path (`evaluator.evaluate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from cheems.chat import Conversation, Truncation, encode_many
from cheems.formats.cheemsbench import BenchItem
from cheems.formats.rewards_file import RewardKey
from cheems.forward import forward_rewards, shared_rewards
from evaluator.evaluate import DEFAULT_OPTIONS, EvalOptions, evaluate, load_subsets
from evaluator.metrics import EvalResult
from trainer.distributed import World, gather_objects


def bench_rewards(
    model: Any,
    tokenizer: Any,
    items: Sequence[BenchItem],
    world: World,
    max_length: int,
    batch_size: int = 8,
    prefix_sharing: bool = False,
) -> dict[RewardKey, float]:
    """Reward of every (prompt, response) of `items`; over-length inputs are truncated on the left.
    `prefix_sharing`: common prefixes packed (`cheems.forward.shared_rewards`), same rewards."""
    keys = [(i.input, r.id) for i in items for r in i.responses]
    convs = [Conversation(i.input, r.content, i.extra.get("sys_prompt") or None) for i in items for r in i.responses]
    share = -(-len(keys) // (world.size * batch_size)) * batch_size  # equal forwards on every rank
    mine = list(range(world.rank * share, min((world.rank + 1) * share, len(keys))))
    scores: dict[RewardKey, float] = {}
    forward = shared_rewards if prefix_sharing else forward_rewards
    model.eval()
    with torch.no_grad():
        for start in range(0, share, batch_size):
            chunk = mine[start : start + batch_size]
            todo = chunk or [0]  # a rank past the end still joins the forward
            encoded = encode_many(tokenizer, [convs[k] for k in todo], max_length, Truncation.LEFT)
            values = forward(model, [e.input_ids for e in encoded], world.device).tolist()
            scores.update({keys[k]: v for k, v in zip(chunk, values, strict=False)})
    model.train()
    merged: dict[RewardKey, float] = {}
    for part in gather_objects(scores, world):
        merged.update(part)
    return merged


def evaluate_model(
    model: Any,
    tokenizer: Any,
    bench_files: Sequence[str | Path],
    world: World,
    max_length: int,
    options: EvalOptions = DEFAULT_OPTIONS,
    prefix_sharing: bool = False,
) -> EvalResult:
    """Every metric of the model on the bench files (each file one subset), on every rank."""
    subsets = load_subsets(bench_files)
    items = [item for _, subset_items in subsets.values() for item in subset_items]
    return evaluate(
        subsets, bench_rewards(model, tokenizer, items, world, max_length, prefix_sharing=prefix_sharing), options
    )
