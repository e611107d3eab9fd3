"""Reward files: one line per response, `{"input": <prompt text>, "id": <response id>, "reward": <float>}`.

Written by scorers (`cheems rewards`), read by `cheems eval` and distant supervision. Responses are
keyed by (prompt text, response id) because response ids are only unique within a prompt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from cheems.errors import FormatError
from cheems.formats.jsonl import iter_objects, require, write_objects

RewardKey = tuple[str, str]  # (prompt text, response id)


def read_rewards(path: str | Path) -> dict[RewardKey, float]:
    """Read a rewards file; FormatError for a bad line, a non-finite reward or a repeated response."""
    rewards: dict[RewardKey, float] = {}
    first_line: dict[RewardKey, int] = {}
    for line, obj in iter_objects(path):
        key = (require(obj, "input", str, path, line), require(obj, "id", str, path, line))
        reward = _finite(require(obj, "reward", (int, float), path, line), path, line)
        if key in first_line:
            raise FormatError(
                path, line, f"duplicate reward for response {key[1]!r}, first on line {first_line[key]}", field="id"
            )
        first_line[key] = line
        rewards[key] = reward
    return rewards


def _finite(value: float, path: str | Path, line: int) -> float:
    """The reward as a finite float; an integer beyond a float's range (10**400) is a FormatError too."""
    try:
        reward = float(value)
    except OverflowError:
        reward = math.inf
    if not math.isfinite(reward):
        raise FormatError(path, line, f"reward must be a finite number, got {_preview(value)}", field="reward")
    return reward


def _preview(value: float) -> str:
    text = str(value)
    return text if len(text) <= 20 else f"{text[:10]}... ({len(text)} digits)"


def write_rewards(path: str | Path, rows: Iterable[tuple[str, str, float]]) -> int:
    """Write (prompt text, response id, reward) rows atomically."""
    return write_objects(path, ({"input": p, "id": i, "reward": r} for p, i, r in rows))
