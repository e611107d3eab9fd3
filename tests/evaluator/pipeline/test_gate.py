"""The promotion gate: the pure decision (manual holds, the first model is promoted, min_gain and max_drop with
the figures that failed), and its steps on a real store (SQLite, PostgreSQL) fed by evaluation results, once per
model however often a result is delivered; then through the real broker."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import Engine

from cheems.v1 import evaluation_pb2, events_pb2
from evaluator.pipeline.gate import Decision, Gate, GatePolicy, decide
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.store import lifecycle, repository
from services.store.db import session_scope

AUTO = GatePolicy("auto", min_gain=0.0, max_drop=0.02, registered="gate")  # the tests' models are registered
BENCH = ["open.jsonl", "human.jsonl"]


def result(overall: float, **subsets: tuple[float, float]) -> dict[str, Any]:
    return {
        "overall": overall,
        "subsets": {n: {"accuracy": a, "exact_match": e} for n, (a, e) in subsets.items()},
    }


def test_the_decision() -> None:
    mine = result(0.80, open=(0.85, 0.75), human=(0.80, 0.80))
    assert decide(mine, None, GatePolicy()).action == "hold"  # manual: a person decides
    assert decide(mine, None, AUTO) == Decision("promote", "the first model evaluated", {"overall": 0.8})
    better = decide(mine, result(0.78, open=(0.83, 0.74), human=(0.79, 0.77)), AUTO)
    assert better.action == "promote" and better.figures["gain"] == pytest.approx(0.02)
    assert decide(mine, result(0.78, open=(0.83, 0.74), human=(0.79, 0.77)), GatePolicy("auto", 0.05)).action == (
        "reject"
    )
    worse = decide(mine, result(0.81, open=(0.85, 0.75), human=(0.80, 0.80)), AUTO)
    assert worse.action == "reject" and "Overall 0.8000 < production's 0.8100" in worse.reason
    dropped = decide(mine, result(0.79, open=(0.95, 0.75), human=(0.70, 0.70)), AUTO)
    assert dropped.action == "reject" and dropped.reason == "open (Acc.+Exact.)/2 fell 0.0500 > max_drop 0.02"
    assert dropped.figures["drops"] == {"open": pytest.approx(0.05), "human": pytest.approx(-0.1)}
    for bad in [{"mode": "sometimes"}, {"max_drop": -0.1}, {"min_gain": 2.0}, {"registered": "promote"}]:
        with pytest.raises(ValueError, match="GatePolicy"):
            GatePolicy(**bad)


def evaluated_run(engine: Engine, model_id: str, outcome: dict[str, Any] | None, bench: list[str] = BENCH) -> str:
    with session_scope(engine) as s:
        run_id = repository.create_run(s, bench, "scorer:1", "paper", 5, 2, model_id=model_id)
        if outcome is None:
            repository.fail_run(s, run_id, "the scorer was away")
        else:
            repository.end_run(s, run_id, outcome)
    return run_id


def test_the_gates_steps_on_a_real_store(engine: Engine) -> None:
    with session_scope(engine) as s:
        for model_id in ("rm-a", "rm-b", "rm-c", "rm-d"):
            lifecycle.register_checkpoint(s, f"/models/{model_id}", model_id, "person:ann")
    gate = Gate(engine, AUTO)

    assert gate.apply(evaluated_run(engine, "rm-a", None)) == []  # a failed evaluation decides nothing
    first = evaluated_run(engine, "rm-a", result(0.70, open=(0.7, 0.7)))
    assert [(c.action, c.to_state) for c in gate.apply(first)] == [
        ("evaluated", "evaluated"),
        ("promoted", "production"),
    ]
    assert gate.apply(first) == []  # delivered again: decided already
    better = evaluated_run(engine, "rm-b", result(0.75, open=(0.76, 0.74)))
    assert [(c.model_id, c.action) for c in gate.apply(better)] == [
        ("rm-b", "evaluated"),
        ("rm-a", "demoted"),
        ("rm-b", "promoted"),
    ]
    worse = evaluated_run(engine, "rm-c", result(0.60, open=(0.6, 0.6)))
    steps = gate.apply(worse)
    assert [c.action for c in steps] == ["evaluated", "rejected"]
    assert steps[-1].actor == "policy:auto" and steps[-1].details["production_overall"] == 0.75
    assert "Overall 0.6000 < production's 0.7500" in steps[-1].reason
    elsewhere = evaluated_run(engine, "rm-d", result(0.99, other=(1.0, 1.0)), bench=["other.jsonl"])
    assert [c.action for c in gate.apply(elsewhere)] == ["evaluated"]  # no production result on that bench: held
    with session_scope(engine) as s:
        assert {m: lifecycle.get_model(s, m).state for m in ("rm-a", "rm-b", "rm-c", "rm-d")} == {
            "rm-a": "evaluated",
            "rm-b": "production",
            "rm-c": "rejected",
            "rm-d": "evaluated",
        }


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_results_on_the_broker_drive_the_gate(engine: Engine, broker: EmbeddedBroker) -> None:
    with session_scope(engine) as s:
        lifecycle.register_checkpoint(s, "/models/rm-first", "rm-first", "person:ann")
    run_id = evaluated_run(engine, "rm-first", result(0.7, open=(0.7, 0.7)))
    publisher = Publisher(broker.bootstrap)
    try:
        run = evaluation_pb2.EvalRun(run_id=run_id, model_id="rm-first", state=evaluation_pb2.RUN_STATE_SUCCEEDED)
        publisher.publish(topics.EVAL_RESULTS, run_id, events_pb2.EvalResultEvent(run=run))
        publisher.flush()
    finally:
        publisher.close()
    consumer = Gate(engine, GatePolicy("auto", group=f"gate-{run_id}", registered="gate")).consumer(broker.bootstrap)
    try:
        for _ in range(60):
            consumer.poll_once(500)
            with session_scope(engine) as s:
                if lifecycle.get_model(s, "rm-first").state == "production":
                    break
        else:
            pytest.fail("the gate never promoted the first evaluated model")
    finally:
        consumer.close()


def test_auto_holds_a_model_registered_by_hand_for_an_admin(engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    """The default policy: registering a checkpoint (an operator may) never chooses production, not even as the first
    model evaluated; the training service's models are decided as before; an admin then promotes by hand."""
    with session_scope(engine) as s:
        lifecycle.register_checkpoint(s, "/models/rm-hand", "rm-hand", "person:operator")
        lifecycle.register_checkpoint(s, "/models/rm-made", "rm-made", "training")
        lifecycle.get_model(s, "rm-made").source = "training"  # as registry.register_model stores a training's
    caplog.set_level(logging.INFO, logger="evaluator.pipeline.gate")
    gate = Gate(engine, GatePolicy("auto"))
    steps = gate.apply(evaluated_run(engine, "rm-hand", result(0.99, open=(0.99, 0.99))))
    assert [(c.action, c.to_state) for c in steps] == [("evaluated", "evaluated")]
    assert gate.apply(evaluated_run(engine, "rm-made", result(0.70, open=(0.7, 0.7))))[-1].action == "promoted"
    with session_scope(engine) as s:
        assert lifecycle.production(s).id == "rm-made"
        assert lifecycle.get_model(s, "rm-hand").state == "evaluated"
    assert "model rm-hand hold: " in caplog.text and "registered by hand" in caplog.text
