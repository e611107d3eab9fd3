"""The benchmarks are scripts, not a package: they import each other with bench/ on the path, as here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


class FakeTokenizer:
    """What `trainer.tiny.tiny_config` reads of a tokenizer: a small vocabulary keeps a model instant to build."""

    pad_token_id = 0
    eos_token_id = 1

    def __len__(self) -> int:
        return 512


@pytest.fixture
def tokenizer() -> FakeTokenizer:
    return FakeTokenizer()
