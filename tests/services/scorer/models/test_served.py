"""The served model and the switch: which model is newer, leases pin one model, the old one closes when idle."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from services.scorer.errors import BackendUnavailable
from services.scorer.models.served import ModelRef, ModelSlot, ServedModel

T0 = datetime(2025, 1, 1, tzinfo=UTC)


class Tokenizer:
    def get_vocab(self) -> dict[str, int]:
        return {"你好": 1, "世界": 2}


class Backend:
    name = "fake"

    def __init__(self) -> None:
        self.closed = threading.Event()

    def ready(self) -> bool:
        return True

    def score(self, sequences: Any, deadline: Any = None) -> list[float]:
        return [0.0] * len(sequences)

    def close(self) -> None:
        self.closed.set()


def served(model_id: str, when: datetime | None = T0) -> ServedModel:
    return ServedModel(ModelRef(model_id, f"/models/{model_id}", when), Backend(), Tokenizer(), max_length=8)


def test_a_lease_pins_its_model_and_the_old_one_closes_when_its_last_call_ends() -> None:
    slot = ModelSlot()
    with pytest.raises(BackendUnavailable, match="no production model"), slot.lease():
        pass
    first, second = served("rm-1"), served("rm-2")
    slot.swap(first)
    with slot.lease() as leased:
        assert slot.swap(second) is first
        assert leased is first and slot.current is second  # the call keeps its model to its end
        time.sleep(0.1)
        assert not first.backend.closed.is_set(), "closed under a call in flight"  # type: ignore[attr-defined]
    assert first.backend.closed.wait(5)  # type: ignore[attr-defined]
    with slot.lease() as leased:
        assert leased is second
    slot.close()
    assert second.closed


def test_an_idle_model_closes_at_once_on_swap() -> None:
    slot, first = ModelSlot(), served("rm-1")
    slot.swap(first)
    slot.swap(served("rm-2"))
    assert first.backend.closed.wait(5)  # type: ignore[attr-defined]
