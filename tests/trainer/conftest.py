"""Shared trainer fixtures: the real Qwen2-vocabulary tokenizer, built once per session (~3-4 s)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    from trainer.tiny import build_tokenizer

    return build_tokenizer()
