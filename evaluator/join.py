"""Joining a rewards file (`cheems.formats.rewards_file`) with bench items.

A rewards file may cover several bench files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.rewards_file import RewardKey
from evaluator.errors import EvaluationError
from evaluator.metrics import ScoredPrompt


def join_rewards(items: Sequence[BenchItem], rewards: Mapping[RewardKey, float], source: str) -> list[ScoredPrompt]:
    """Join bench items with their rewards; every benchmark response must have one."""
    scored = []
    for item in items:
        values = []
        for response in item.responses:
            reward = rewards.get((item.input, response.id))
            if reward is None:
                raise EvaluationError(
                    f"{source}:{item.line}: no reward for response {response.id!r} of prompt {_preview(item.input)!r}"
                )
            values.append(reward)
        scored.append(ScoredPrompt(item.primary_category, tuple(item.ranks()), tuple(values)))
    return scored


def _preview(text: str, limit: int = 30) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
