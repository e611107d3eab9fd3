"""Evaluation runs in the store, on SQLite and PostgreSQL: creation, idempotent scores, progress, the end of a run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from cheems.errors import NotFound
from services.store import repository as repo
from services.store.db import session_scope
from services.store.errors import InvalidRecord, UnknownRun

RESULT = {"semantics": "paper", "overall": 0.5, "subsets": {"开放": {"accuracy": None}}}


def new_run(engine: Engine, total: int = 2, ece_bins: int = 7) -> str:
    with session_scope(engine) as session:
        return repo.create_run(session, ["open.jsonl"], "scorer:50051", "official", ece_bins, total)


def test_a_run_is_recorded_running_with_its_options(engine: Engine) -> None:
    run_id = new_run(engine)
    with session_scope(engine) as session:
        run = repo.get_run(session, run_id)
        assert (run.state, run.items_total, run.semantics, run.ece_bins) == ("running", 2, "official", 7)
        assert (run.bench_files, run.scorer_url, run.result) == (["open.jsonl"], "scorer:50051", None)


def test_scores_are_stored_once_and_counted(engine: Engine) -> None:
    run_id = new_run(engine)
    with session_scope(engine) as session:
        assert repo.record_scores(session, run_id, "open:0", {"r1": 0.5, "r2": -1.0})
    with session_scope(engine) as session:  # a redelivered score, even with other values, is a no-op
        assert not repo.record_scores(session, run_id, "open:0", {"r1": 9.0, "r2": 9.0})
        assert repo.record_scores(session, run_id, "open:1", {"r2": 2.0, "r1": 1.0})
    with session_scope(engine) as session:
        assert repo.count_scored(session, run_id) == 2
        scores = repo.run_scores(session, run_id)
    assert scores == {"open:0": {"r1": 0.5, "r2": -1.0}, "open:1": {"r2": 2.0, "r1": 1.0}}
    assert list(scores["open:1"]) == ["r2", "r1"]  # response order as published


def test_a_run_ends_once(engine: Engine) -> None:
    done, failed = new_run(engine), new_run(engine)
    with session_scope(engine) as session:
        assert repo.end_run(session, done, RESULT)
        assert repo.end_run(session, failed, None)
    with session_scope(engine) as session:
        assert not repo.end_run(session, done, None) and not repo.end_run(session, failed, RESULT)
        assert (repo.get_run(session, done).state, repo.get_run(session, done).result) == ("succeeded", RESULT)
        assert (repo.get_run(session, failed).state, repo.get_run(session, failed).result) == ("failed", None)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: repo.get_run(s, "nope"),
        lambda s: repo.record_scores(s, "nope", "open:0", {"r1": 1.0}),
        lambda s: repo.end_run(s, "nope", None),
    ],
)
def test_an_unknown_run_is_not_found(
    engine: Engine, rows: Callable[[], dict[str, int]], call: Callable[..., object]
) -> None:
    with pytest.raises(UnknownRun, match="no run 'nope'") as error, session_scope(engine) as session:
        call(session)
    assert isinstance(error.value, NotFound)
    assert rows()["eval_scores"] == 0


@pytest.mark.parametrize(
    ("ece_bins", "total", "message"),
    [(0, 1, "ece_bins: expected an integer >= 1"), (5, -1, "items_total: expected an integer >= 0")],
)
def test_bad_run_values_store_nothing(
    engine: Engine, rows: Callable[[], dict[str, int]], ece_bins: int, total: int, message: str
) -> None:
    with pytest.raises(InvalidRecord, match=message):
        new_run(engine, total, ece_bins)
    assert rows()["eval_runs"] == 0


def test_many_scores_are_stored_in_one_go_each_item_once(engine: Engine) -> None:
    first, second = new_run(engine), new_run(engine)
    with session_scope(engine) as session:
        assert repo.record_scores(session, first, "open:0", {"r1": 0.5})
    rows = [
        (first, "open:0", {"r1": 9.0}),  # a replay of a stored score: skipped
        (first, "open:1", {"r2": 2.0, "r1": 1.0}),
        (second, "open:0", {"r1": -1.0}),
        (first, "open:1", {"r2": 7.0, "r1": 7.0}),  # the same item twice in one go: the first is kept
    ]
    with session_scope(engine) as session:
        assert repo.record_many_scores(session, rows) == 2
        assert repo.record_many_scores(session, []) == 0
    with session_scope(engine) as session:
        assert repo.run_scores(session, first) == {"open:0": {"r1": 0.5}, "open:1": {"r2": 2.0, "r1": 1.0}}
        assert repo.run_scores(session, second) == {"open:0": {"r1": -1.0}}
        assert set(repo.runs_by_id(session, [first, "nope", second, first])) == {first, second}
        assert repo.runs_by_id(session, []) == {}


@pytest.mark.parametrize(
    ("bad", "error"), [(("nope", "open:0"), UnknownRun), (("", "x" * 129), InvalidRecord), (("", ""), InvalidRecord)]
)
def test_many_scores_with_one_bad_row_store_nothing(
    engine: Engine, rows: Callable[[], dict[str, int]], bad: tuple[str, str], error: type[Exception]
) -> None:
    run_id = new_run(engine)
    bad_row = (bad[0] or run_id, bad[1], {"r1": 1.0})
    with pytest.raises(error), session_scope(engine) as session:
        repo.record_many_scores(session, [(run_id, "open:0", {"r1": 0.5}), bad_row])
    assert rows()["eval_scores"] == 0
