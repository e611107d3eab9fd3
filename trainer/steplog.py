"""Per-step figures kept where they are computed and read in one go: no host synchronisation per micro-step.

Reading a CUDA tensor's value (`.item()`, `float()`) waits for every kernel queued before it, so a loop that
reads its loss after each forward cannot queue the next one while the GPU works. The training loop adds each
micro-step's loss parts to `Totals` (tensors on the device), hands each step's record to `StepLog`, and
`flush()` reads every pending tensor with one copy, at logging, evaluation and checkpoint steps only.

    totals = Totals()
    totals.add(parts, weight=1 / forwards, tokens=n, responses=m)   # no sync
    log.add(totals.record(step=3, grad_norm=norm))                   # no sync
    for record in log.flush(): ...                                   # one sync, plain floats

A step's record: loss, bt (the Bradley-Terry term), reg, accuracy, margin (mean r_w - r_l), reward_mean and
reward_std (over the step's responses, every rank's), counts, and with a `Meter` the peak memory, the memory
plan's figure and MFU (`trainer.meter`); `flush` adds seconds and tokens_per_s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.loss import LossParts
from trainer.meter import Meter


@dataclass
class Totals:
    """One optimizer step's sums: loss parts weighted as their backward was, counts as Python ints."""

    loss: torch.Tensor | float = 0.0
    bt: torch.Tensor | float = 0.0
    reg: torch.Tensor | float = 0.0
    correct: torch.Tensor | float = 0.0  # pairs the model ordered right (accuracy x pairs)
    margins: torch.Tensor | float = 0.0  # sum of r_w - r_l over the pairs
    rewards: torch.Tensor | float = 0.0  # sum of the rewards
    squares: torch.Tensor | float = 0.0  # sum of the rewards' squares
    rewarded: int = 0  # rewards summed
    pairs: int = 0
    tokens: int = 0
    responses: int = 0
    forwards: int = 0

    def add(self, parts: LossParts, weight: float, tokens: int, responses: int) -> None:
        self.loss = self.loss + parts.loss.detach() * weight
        self.bt = self.bt + parts.bt.detach() * weight
        self.reg = self.reg + parts.reg.detach() * weight
        if parts.pairs:
            self.correct = self.correct + parts.accuracy * parts.pairs
            self.margins = self.margins + parts.margin * parts.pairs
        self.rewards = self.rewards + parts.reward_mean * parts.responses
        self.squares = self.squares + parts.reg.detach() * parts.responses
        self.rewarded += parts.responses
        self.pairs += parts.pairs
        self.tokens += tokens
        self.responses += responses
        self.forwards += 1

    def record(self, **extra: Any) -> dict[str, Any]:
        """The step's record; tensor values stay tensors until `StepLog.flush`."""
        nan = float("nan")
        accuracy = self.correct / self.pairs if self.pairs else nan
        margin = self.margins / self.pairs if self.pairs else nan
        mean = self.rewards / self.rewarded if self.rewarded else nan
        variance = self.squares / self.rewarded - mean * mean if self.rewarded else nan
        std = variance.clamp_min(0).sqrt() if isinstance(variance, torch.Tensor) else math.sqrt(max(variance, 0))
        return {
            **extra,
            "loss": self.loss,
            "bt": self.bt,
            "reg": self.reg,
            "accuracy": accuracy,
            "margin": margin,
            "reward_mean": mean,
            "reward_std": std,
            "pairs": self.pairs,
            "tokens": self.tokens,
            "responses": self.responses,
            "forwards": self.forwards,
        }


@dataclass
class StepLog:
    """Records waiting to be read; `flush` turns their tensors into floats with one transfer and spreads the
    wall time since the last flush over them (the device runs ahead of the host, so a step's own time is not
    known without the synchronisation this avoids)."""

    pending: list[dict[str, Any]] = field(default_factory=list)
    since: float = field(default_factory=time.perf_counter)
    meter: Meter | None = None  # peak memory at each step, MFU at each flush

    def add(self, record: dict[str, Any]) -> None:
        if self.meter is not None:
            self.meter.stamp(record)
        self.pending.append(record)

    def flush(self) -> list[dict[str, Any]]:
        places = [(r, k) for r in self.pending for k, v in r.items() if isinstance(v, torch.Tensor)]
        if places:
            tensors = [_local(r[k]).detach().float().reshape(()) for r, k in places]
            values = torch.stack([t.to(tensors[0].device) for t in tensors]).tolist()
            for (record, key), value in zip(places, values, strict=True):
                record[key] = value
        now = time.perf_counter()
        out, self.pending = self.pending, []
        for record in out:
            record["seconds"] = (now - self.since) / len(out)
            record["tokens_per_s"] = record["tokens"] / record["seconds"] if record["seconds"] > 0 else 0.0
            if self.meter is not None:
                self.meter.finish(record)
        self.since = now
        return out


def _local(value: torch.Tensor) -> torch.Tensor:
    """A plain tensor: FSDP2's gradient norm is a replicated DTensor."""
    full = getattr(value, "full_tensor", None)
    return full() if callable(full) else value
