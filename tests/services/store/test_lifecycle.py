"""The model lifecycle in the store, on SQLite and PostgreSQL: states, the production alias, the recorded steps,
rollback, retention, and a promotion racing a rollback."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine, func, select

from services.store import lifecycle, registry
from services.store.db import session_scope
from services.store.errors import Conflict, InvalidRecord, UnknownModel
from services.store.models import RegisteredModel


def register(engine: Engine, *ids: str) -> None:
    with session_scope(engine) as s:
        for model_id in ids:
            lifecycle.register_checkpoint(s, f"/models/{model_id}", model_id, "person:ann")


def states(engine: Engine) -> dict[str, str]:
    with session_scope(engine) as s:
        return {m.id: m.state for m in s.scalars(select(RegisteredModel))}


def production(engine: Engine) -> str | None:
    with session_scope(engine) as s:
        found = lifecycle.production(s)
        return None if found is None else found.id


def test_a_registered_checkpoint_is_a_candidate_with_its_step_recorded(engine: Engine) -> None:
    with session_scope(engine) as s:
        model, change = lifecycle.register_checkpoint(s, "/models/qwen-rm", None, "person:ann", "from the lab")
        assert model.id.startswith("rm-") and model.source == "registered" and model.training_id is None
        assert (change.action, change.from_state, change.to_state) == ("registered", None, "candidate")
    with session_scope(engine) as s:
        [step] = lifecycle.transitions(s, model.id)
        assert (step.actor, step.reason, step.details) == ("person:ann", "from the lab", {"path": "/models/qwen-rm"})
        assert lifecycle.resolve(s, model.id).state == "candidate"


@pytest.mark.parametrize("bad", ["", "production", "a b", "x" * 65, "-lead", "名字", "a\x00b"])
def test_bad_model_ids_are_refused_and_nothing_is_stored(engine: Engine, bad: str) -> None:
    with pytest.raises(InvalidRecord, match="model id"), session_scope(engine) as s:
        lifecycle.register_checkpoint(s, "/models/x", bad or "\n", "person:ann")
    assert states(engine) == {}


def test_an_id_is_registered_once(engine: Engine) -> None:
    register(engine, "rm-a")
    with pytest.raises(Conflict, match="already registered"), session_scope(engine) as s:
        lifecycle.register_checkpoint(s, "/elsewhere", "rm-a", "person:ann")


def test_promote_demote_and_rollback_both_ways(engine: Engine) -> None:
    register(engine, "rm-a", "rm-b")
    with session_scope(engine) as s:
        with pytest.raises(UnknownModel, match="no model is production yet"):
            lifecycle.resolve(s, "production")
        assert [c.action for c in lifecycle.mark_evaluated(s, "rm-a", "policy:auto", overall=0.8)] == ["evaluated"]
        assert lifecycle.mark_evaluated(s, "rm-a", "policy:auto") == []  # evaluated once
        assert [c.to_state for c in lifecycle.promote(s, "rm-a", "policy:auto", "first model")] == ["production"]
    with session_scope(engine) as s:
        assert lifecycle.promote(s, "rm-a", "person:ann") == []  # already production: nothing recorded
        changes = lifecycle.promote(s, "rm-b", "person:ann", "a candidate a person trusts")
        assert [(c.model_id, c.action, c.to_state) for c in changes] == [
            ("rm-a", "demoted", "evaluated"),
            ("rm-b", "promoted", "production"),
        ]
    assert states(engine) == {"rm-a": "evaluated", "rm-b": "production"}
    with session_scope(engine) as s:
        assert lifecycle.resolve(s, "production").id == "rm-b" and lifecycle.aliases(s) == {"rm-b": ["production"]}
        back = lifecycle.rollback(s, "person:ann")
        assert [(c.model_id, c.action) for c in back] == [("rm-b", "demoted"), ("rm-a", "rolled_back")]
    assert production(engine) == "rm-a"
    with session_scope(engine) as s:
        lifecycle.rollback(s, "person:ann")  # as `kubectl rollout undo`: a second undo returns
    assert production(engine) == "rm-b" and states(engine) == {"rm-a": "evaluated", "rm-b": "production"}


def test_rollback_needs_an_earlier_production_model(engine: Engine) -> None:
    register(engine, "rm-a")
    with pytest.raises(Conflict, match="nothing to roll back"), session_scope(engine) as s:
        lifecycle.rollback(s, "person:ann")
    with session_scope(engine) as s:
        lifecycle.promote(s, "rm-a", "person:ann")
    with pytest.raises(Conflict, match="no earlier production model"), session_scope(engine) as s:
        lifecycle.rollback(s, "person:ann")
    assert production(engine) == "rm-a"


def test_rejection_needs_a_reason_spares_production_and_promotion_needs_force(engine: Engine) -> None:
    register(engine, "rm-a", "rm-b")
    with session_scope(engine) as s:
        lifecycle.promote(s, "rm-a", "person:ann")
    with pytest.raises(InvalidRecord, match="reason"), session_scope(engine) as s:
        lifecycle.reject(s, "rm-b", "person:ann", "  ")
    with pytest.raises(Conflict, match="is production"), session_scope(engine) as s:
        lifecycle.reject(s, "rm-a", "person:ann", "changed my mind")
    with session_scope(engine) as s:
        [change] = lifecycle.reject(s, "rm-b", "policy:auto", "Overall fell", overall=0.41, production_overall=0.8)
        assert change.details == {"overall": 0.41, "production_overall": 0.8}
        assert lifecycle.unservable_reason(lifecycle.get_model(s, "rm-b")) == "model 'rm-b' was rejected"
    with pytest.raises(Conflict, match="needs force"), session_scope(engine) as s:
        lifecycle.promote(s, "rm-b", "person:ann")
    with session_scope(engine) as s:
        lifecycle.promote(s, "rm-b", "person:ann", "tested by hand", force=True)
    assert production(engine) == "rm-b"
    with pytest.raises(UnknownModel), session_scope(engine) as s:
        lifecycle.promote(s, "rm-nobody", "person:ann")


def test_the_last_three_former_production_models_stay_servable(engine: Engine) -> None:
    ids = [f"rm-{i}" for i in range(6)]
    register(engine, *ids)
    retired = []
    for model_id in ids:
        with session_scope(engine) as s:
            retired += [c.model_id for c in lifecycle.promote(s, model_id, "policy:auto") if c.action == "retired"]
    assert retired == ["rm-0", "rm-1"]
    assert states(engine) == {
        "rm-0": "retired",
        "rm-1": "retired",
        "rm-2": "evaluated",
        "rm-3": "evaluated",
        "rm-4": "evaluated",
        "rm-5": "production",
    }
    with session_scope(engine) as s:
        assert lifecycle.unservable_reason(lifecycle.get_model(s, "rm-0")) == "model 'rm-0' was retired"
        assert lifecycle.rollback(s, "person:ann")[-1].model_id == "rm-4"


def test_a_trained_model_is_registered_as_a_candidate(engine: Engine) -> None:
    with session_scope(engine) as s:
        registry.add_dataset(s, "a" * 64, "human", "d.jsonl", 1, 1, 1)
        training = registry.create_training(s, "a" * 64, "tiny-cpu", {}, "local", "out/{id}")
        model, _ = registry.register_model(s, training.id, "out/model", None)
    with session_scope(engine) as s:
        [step] = lifecycle.transitions(s, model.id)
        assert (step.action, step.to_state, step.actor) == ("registered", "candidate", "training")
        assert lifecycle.get_model(s, model.id).source == "training"


def test_a_promotion_racing_rollbacks_leaves_one_production_model(engine: Engine) -> None:
    ids = [f"rm-{i}" for i in range(4)]
    register(engine, *ids)
    with session_scope(engine) as s:
        lifecycle.promote(s, "rm-0", "person:ann")
    with session_scope(engine) as s:
        lifecycle.promote(s, "rm-1", "person:ann")
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def act(index: int) -> None:
        start.wait()
        try:
            for round_ in range(3):
                with session_scope(engine) as s:
                    if index % 2:
                        lifecycle.rollback(s, f"person:{index}")
                    else:
                        lifecycle.promote(s, ids[(index + round_) % 4], f"person:{index}")
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=act, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    found = states(engine)
    assert list(found.values()).count("production") == 1
    assert found[production(engine) or ""] == "production"
    with session_scope(engine) as s:
        steps = lifecycle.transitions(s, limit=1000)
        to_production = [t for t in steps if t.to_state == "production"]
        demoted = [t for t in steps if t.action == "demoted"]
        assert len(to_production) == len(demoted) + 1  # every hand-over demoted exactly the one before
        assert s.scalar(select(func.count()).select_from(RegisteredModel)) == 4
