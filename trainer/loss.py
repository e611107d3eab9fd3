"""The CheemsRM objective (paper eqs. 3-4): Bradley-Terry over labelled pairs plus a Gaussian prior.

    loss = mean_pairs(-log sigmoid(r_w - r_l - margin)) + reg_coef * mean_responses(r^2)

computed over every pair present in the global batch (rewards gathered across ranks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LossParts:
    loss: torch.Tensor
    bt: torch.Tensor  # Bradley-Terry term (0 when the batch has no pairs)
    reg: torch.Tensor  # mean(r^2), before reg_coef
    pairs: int
    accuracy: torch.Tensor  # share of pairs with r_w > r_l (a tensor: read it without waiting per step)
    margin: torch.Tensor  # mean of r_w - r_l over the pairs (NaN without pairs)
    reward_mean: torch.Tensor  # mean reward of the batch's responses
    responses: int  # rewards in the batch


def bt_loss(
    rewards: torch.Tensor, pairs: Sequence[tuple[int, int]], reg_coef: float = 0.1, margin: float = 0.0
) -> LossParts:
    """Loss over `rewards` (1-D) and pairs of (chosen, rejected) positions; a batch without pairs is fine."""
    reg = rewards.pow(2).mean()
    if pairs:
        index = torch.as_tensor(pairs, dtype=torch.long, device=rewards.device)
        diff = rewards[index[:, 0]] - rewards[index[:, 1]]
        bt = -F.logsigmoid(diff - margin).mean()
        accuracy = (diff > 0).float().mean().detach()
        gap = diff.mean().detach()
    else:
        bt = rewards.sum() * 0.0  # keeps the graph connected so DDP sees every parameter used
        accuracy = rewards.new_tensor(float("nan")).detach()
        gap = accuracy
    mean = rewards.mean().detach()
    return LossParts(bt + reg_coef * reg, bt, reg, len(pairs), accuracy, gap, mean, rewards.numel())
