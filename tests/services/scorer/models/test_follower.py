"""The follower's decisions without a server: a production model that failed to load is not tried again, whether
the registry's reconciliation or an event (late, or relayed twice) names it; the next production model is. An
event is only a hint: the registry decides what is production and where it is."""

from __future__ import annotations

from typing import Any

import pytest

from cheems.v1 import events_pb2, training_pb2
from services.scorer.errors import BackendUnavailable, UnknownModel
from services.scorer.models.follow import Follower
from services.scorer.models.served import ModelRef, ModelSlot


class Feed:
    def poll(self, timeout_ms: int) -> list[Any]:
        return []

    def close(self) -> None:
        pass


def promoted(model_id: str, path: str = "") -> events_pb2.ModelEvent:
    event = events_pb2.ModelEvent(model=training_pb2.Model(model_id=model_id, path=path or f"/models/{model_id}"))
    event.change.to_state = "production"
    return event


class Registry:
    """A registry stand-in: models by id, and which one is production (`lookup` as `registry_lookup` answers)."""

    def __init__(self, production: str, *others: str) -> None:
        self.production, self.models = production, {m: ModelRef(m, f"/models/{m}") for m in (production, *others)}
        self.away = False

    def lookup(self, name: str) -> tuple[ModelRef, list[str]]:
        if self.away:
            raise BackendUnavailable("the model registry is unreachable: connection refused")
        model_id = self.production if name == "production" else name
        if model_id not in self.models:
            raise UnknownModel(f"no model {name!r}")
        return self.models[model_id], ["production"] if model_id == self.production else []


def test_a_model_that_failed_to_load_is_not_loaded_again_by_any_path() -> None:
    tried: list[str] = []

    def load(ref: ModelRef) -> Any:
        tried.append(ref.model_id)
        raise OSError(f"{ref.path}/config.json is not a valid JSON file")

    registry = Registry("rm-broken", "rm-next")
    follower = Follower(Feed(), ModelSlot(), load, registry.lookup)  # type: ignore[arg-type]
    assert follower.reconcile() is False  # the registry names it first: loaded once, fails
    assert follower.on_event(promoted("rm-broken")) is False  # its event comes after: not loaded again
    assert follower.on_event(promoted("rm-broken")) is False  # the outbox relays it twice
    assert follower.reconcile() is False
    assert tried == ["rm-broken"] and "rm-broken" in follower.slot.follow_error
    registry.production = "rm-next"
    follower.on_event(promoted("rm-next"))  # another production model is tried as usual
    assert tried == ["rm-broken", "rm-next"]


class Loaded:
    def __init__(self, ref: ModelRef) -> None:
        self.ref, self.closed = ref, False

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("event", "result", "why"),
    [
        (promoted("rm-forged", "/tmp/elsewhere"), "refused", "the registry does not serve it (no model 'rm-forged')"),
        (promoted("rm-candidate"), "refused", "production alias does not point at it"),
        (promoted("rm-prod", "/tmp/elsewhere"), "refused", "'/tmp/elsewhere' is not the registry's path"),
        (promoted("production"), "refused", "it is no model id: the registry resolves it to rm-prod"),
    ],
    ids=["unknown id", "a candidate said to be production", "production's id, another path", "an alias as id"],
)
def test_an_event_the_registry_does_not_back_loads_nothing(
    event: events_pb2.ModelEvent, result: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    loaded: list[ModelRef] = []
    counted: list[str] = []
    registry = Registry("rm-prod", "rm-candidate")
    follower = Follower(Feed(), ModelSlot(), lambda ref: loaded.append(ref), registry.lookup, count=counted.append)  # type: ignore[arg-type,func-returns-value]
    assert follower.on_event(event) is False
    assert (loaded, counted, follower.slot.current) == ([], [result], None)
    [record] = [r for r in caplog.records if r.name == "services.scorer.models.follow"]
    assert record.levelname == "WARNING" and repr(event.model.model_id) in record.getMessage()
    assert why in record.getMessage()


def test_a_confirmed_event_loads_the_registrys_record_and_an_unreadable_registry_nothing() -> None:
    loaded: list[ModelRef] = []
    counted: list[str] = []
    registry = Registry("rm-prod")

    def load(ref: ModelRef) -> Loaded:
        loaded.append(ref)
        return Loaded(ref)

    follower = Follower(Feed(), ModelSlot(), load, registry.lookup, count=counted.append)  # type: ignore[arg-type]
    registry.away = True
    assert follower.on_event(promoted("rm-prod")) is False and counted == ["unverified"] and not loaded
    registry.away = False
    bare = events_pb2.ModelEvent(model=training_pb2.Model(model_id="rm-prod"))  # no path: the registry's is used
    bare.change.to_state = "production"
    assert follower.on_event(bare) is True
    assert loaded == [registry.models["rm-prod"]] and counted == ["unverified", "applied"]
    registered = events_pb2.ModelEvent(model=training_pb2.Model(model_id="rm-prod"))
    assert follower.on_event(registered) is False and counted[-1] == "ignored"


def test_without_a_registry_no_event_is_acted_on() -> None:
    loaded: list[ModelRef] = []
    follower = Follower(Feed(), ModelSlot(), lambda ref: loaded.append(ref))  # type: ignore[arg-type,func-returns-value]
    assert follower.on_event(promoted("rm-prod")) is False and loaded == []
