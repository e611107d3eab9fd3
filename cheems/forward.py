"""The reward model's forward pass over token sequences, shared by training, evaluation and serving.

    values = score_in_groups(model, [[151644, 872], [151644, 872, 198]], max_batch=64, device="cpu")

`forward_rewards` reads the scalar head at each sequence's last real token (right padding);
`score_in_groups` sorts sequences into length groups first so padding stays small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

MAX_BATCH_TOKENS = 32768  # padded tokens per forward in `score_in_groups`


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded input_ids and attention_mask."""
    longest = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, : len(seq)] = 1
    return ids, mask


def forward_rewards(model: Any, sequences: Sequence[Sequence[int]], device: torch.device | str = "cpu") -> torch.Tensor:
    """Scalar reward of each token sequence: the head at its last token, as float32. DDP-wrapped models work."""
    ids, mask = pad_batch(sequences, getattr(model, "module", model).config.pad_token_id)
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    return logits[:, 0].float()


def length_groups(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped shortest first; a group holds at most max_batch items and max_tokens padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        padded = (len(current) + 1) * lengths[i]  # sorted, so this item is the group's longest
        if current and (len(current) == max_batch or padded > max_tokens):
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def score_in_groups(model: Any, sequences: Sequence[Sequence[int]], max_batch: int, device: str) -> list[float]:
    """Run `model` over length-grouped batches; results in input order."""
    out = [0.0] * len(sequences)
    with torch.no_grad():
        for group in length_groups([len(s) for s in sequences], max_batch, MAX_BATCH_TOKENS):
            values = forward_rewards(model, [sequences[i] for i in group], device).tolist()
            for i, v in zip(group, values, strict=True):
                out[i] = v
    return out
