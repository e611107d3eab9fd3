"""Reward files: one line per response, `{"input": <prompt text>, "id": <response id>, "reward": <float>}`.

Written by scorers (`cheems rewards`), read by `cheems eval` and distant supervision. Responses are
keyed by (prompt text, response id) because response ids are only unique within a prompt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from cheems.errors import FormatError
from cheems.jsonl import iter_objects, require, write_objects

RewardKey = tuple[str, str]  # (prompt text, response id)


def read_rewards(path: str | Path) -> dict[RewardKey, float]:
    """Read a rewards file; FormatError for a bad line, a non-finite reward or a repeated response."""
    rewards: dict[RewardKey, float] = {}
    first_line: dict[RewardKey, int] = {}
    for line, obj in iter_objects(path):
        key = (require(obj, "input", str, path, line), require(obj, "id", str, path, line))
        reward = require(obj, "reward", (int, float), path, line)
        if not math.isfinite(reward):
            raise FormatError(path, line, f"reward must be finite, got {reward}", field="reward")
        if key in first_line:
            raise FormatError(
                path, line, f"duplicate reward for response {key[1]!r}, first on line {first_line[key]}", field="id"
            )
        first_line[key] = line
        rewards[key] = float(reward)
    return rewards


def write_rewards(path: str | Path, rows: Iterable[tuple[str, str, float]]) -> int:
    """Write (prompt text, response id, reward) rows atomically."""
    return write_objects(path, ({"input": p, "id": i, "reward": r} for p, i, r in rows))
