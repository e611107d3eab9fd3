"""The result sink's batches, without I/O: a polled batch of ScoreEvents split into rows to store and runs to fail.

    plan = plan_batch(events)                 # plan.rows: ScoreRow per event with scores; plan.failures: (run, why)
    kept = accept(plan.rows, {"run-1": "rm-a", "run-2": None}, dropped.append)   # the runs in the store, by model

A worker that gave up on a request (`error`) and an event whose response ids and scores do not pair up
both fail their run: the run cannot complete with that item, and storing the event would fail the same
way after every redelivery. `accept` keeps the rows of runs the store holds, from the run's model when it
names one, each (run, item) once: the first kept, as the store keeps the first of a replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class ScoreRow(NamedTuple):
    """One item's scores, as a ScoreEvent carries them."""

    run_id: str
    item: str  # "<subset>:<index>"
    model_id: str  # the model that scored
    scores: dict[str, float]  # response id -> score


class Dropped(NamedTuple):
    row: ScoreRow
    wanted: str | None  # the model the run evaluates; None: the store holds no such run


@dataclass
class BatchPlan:
    rows: list[ScoreRow] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (run id, reason), in the order seen


def plan_batch(events: Iterable[Any]) -> BatchPlan:
    """The rows to store and the runs to fail, in the order of `events`."""
    plan = BatchPlan()
    for event in events:
        if event.error:
            plan.failures.append((event.run_id, event.error))
        elif len(event.response_ids) != len(event.scores):
            plan.failures.append((event.run_id, malformed(event)))
        else:
            scores = dict(zip(event.response_ids, event.scores, strict=True))
            plan.rows.append(ScoreRow(event.run_id, event.prompt_id, event.model_id, scores))
    return plan


def malformed(event: Any) -> str:
    return (
        f"the scores of {event.prompt_id} cannot be stored: {len(event.response_ids)} response ids "
        f"but {len(event.scores)} scores"
    )


def accept(
    rows: Iterable[ScoreRow], models: Mapping[str, str | None], dropped: Callable[[Dropped], None]
) -> list[ScoreRow]:
    """The rows to store: of runs in `models` (run id -> the model it evaluates, None for any), from that
    model, the first of each (run, item); `dropped` is told of every other row but repeats."""
    kept: dict[tuple[str, str], ScoreRow] = {}
    for row in rows:
        if row.run_id not in models:
            dropped(Dropped(row, None))
            continue
        wanted = models[row.run_id]
        if wanted and row.model_id != wanted:
            dropped(Dropped(row, wanted))
            continue
        kept.setdefault((row.run_id, row.item), row)
    return list(kept.values())


def only_run(events: Iterable[Any]) -> str | None:
    """The run id the events all belong to (what their log lines carry); None for events of several runs."""
    runs = {e.run_id for e in events}
    return runs.pop() if len(runs) == 1 else None


def runs_of(rows: Iterable[ScoreRow]) -> list[str]:
    """The run ids of `rows`, each once, in first-seen order."""
    return list(dict.fromkeys(row.run_id for row in rows))
