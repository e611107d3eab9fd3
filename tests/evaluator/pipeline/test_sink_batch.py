"""The result sink's batches without I/O: rows and failures of a batch, the rows kept per run and model."""

from __future__ import annotations

from cheems.v1 import events_pb2
from evaluator.pipeline.sink_batch import Dropped, ScoreRow, accept, plan_batch, runs_of


def scored(
    run_id: str, item: str, model_id: str = "rm-a", scores: tuple[float, ...] = (1.0, 2.0)
) -> events_pb2.ScoreEvent:
    return events_pb2.ScoreEvent(
        run_id=run_id, prompt_id=item, response_ids=["r1", "r2"], scores=scores, model_id=model_id
    )


def test_a_batch_splits_into_rows_and_runs_to_fail_in_order() -> None:
    gave_up = events_pb2.ScoreEvent(run_id="run-2", prompt_id="open:0", error="the scorer serves 'x', not 'y'")
    plan = plan_batch(
        [scored("run-1", "open:0"), gave_up, scored("run-3", "open:1", scores=(1.0,)), scored("run-1", "open:1")]
    )
    assert plan.rows == [
        ScoreRow("run-1", "open:0", "rm-a", {"r1": 1.0, "r2": 2.0}),
        ScoreRow("run-1", "open:1", "rm-a", {"r1": 1.0, "r2": 2.0}),
    ]
    assert plan.failures == [
        ("run-2", "the scorer serves 'x', not 'y'"),
        ("run-3", "the scores of open:1 cannot be stored: 2 response ids but 1 scores"),
    ]


def test_rows_of_unknown_runs_and_other_models_are_dropped_and_repeats_kept_once() -> None:
    rows = plan_batch([
        scored("run-b", "open:0", "rm-x", (9.0, 9.0)),  # another model than the run's: dropped...
        scored("run-b", "open:0", "rm-b", (1.0, 2.0)),  # ...so this one is the first of its item and kept
        scored("run-b", "open:0", "rm-b", (3.0, 4.0)),  # a repeat: the first is kept
        scored("gone", "open:0"),
        scored("any", "open:0", "rm-z"),  # a run of no model in particular takes any
    ]).rows  # fmt: skip
    dropped: list[Dropped] = []
    kept = accept(rows, {"run-b": "rm-b", "any": None}, dropped.append)
    assert [(r.run_id, r.scores) for r in kept] == [("run-b", {"r1": 1.0, "r2": 2.0}), ("any", {"r1": 1.0, "r2": 2.0})]
    assert [(d.row.run_id, d.row.model_id, d.wanted) for d in dropped] == [
        ("run-b", "rm-x", "rm-b"),
        ("gone", "rm-a", None),
    ]
    assert runs_of(rows) == ["run-b", "gone", "any"]
