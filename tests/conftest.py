"""Shared fixtures: paths of the bundled sample benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample"


@pytest.fixture
def sample_paths() -> tuple[list[Path], Path]:
    """([open.jsonl, human.jsonl], rewards.jsonl) of the bundled sample."""
    return [SAMPLE / "open.jsonl", SAMPLE / "human.jsonl"], SAMPLE / "rewards.jsonl"
