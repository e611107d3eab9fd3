"""The follower's decisions without a server: a production model that failed to load is not tried again, whether
the registry's reconciliation or an event (late, or relayed twice) names it; the next production model is."""

from __future__ import annotations

from typing import Any

from cheems.v1 import events_pb2, training_pb2
from services.scorer.models.follow import Follower
from services.scorer.models.served import ModelRef, ModelSlot


class Feed:
    def poll(self, timeout_ms: int) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def promoted(model_id: str) -> events_pb2.ModelEvent:
    event = events_pb2.ModelEvent(model=training_pb2.Model(model_id=model_id, path=f"/models/{model_id}"))
    event.change.to_state = "production"
    return event


def test_a_model_that_failed_to_load_is_not_loaded_again_by_any_path() -> None:
    tried: list[str] = []

    def load(ref: ModelRef) -> Any:
        tried.append(ref.model_id)
        raise OSError(f"{ref.path}/config.json is not a valid JSON file")

    production = ModelRef("rm-broken", "/models/rm-broken")
    follower = Follower(Feed(), ModelSlot(), load, lambda name: (production, []))  # type: ignore[arg-type]
    assert follower.reconcile() is False  # the registry names it first: loaded once, fails
    assert follower.on_event(promoted("rm-broken")) is False  # its event comes after: not loaded again
    assert follower.on_event(promoted("rm-broken")) is False  # the outbox relays it twice
    assert follower.reconcile() is False
    assert tried == ["rm-broken"] and "rm-broken" in follower.slot.follow_error
    follower.on_event(promoted("rm-next"))  # another production model is tried as usual
    assert tried == ["rm-broken", "rm-next"]
