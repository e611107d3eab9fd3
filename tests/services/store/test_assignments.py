"""Whose a task is (`services.store.assignments`, SQLite and PostgreSQL): a listing assigns an annotator one task
per prompt, the claim rule refuses a human annotation of a task not assigned to its annotator or annotated already,
and an operator's reassignments and voids are recorded with the actor (a void's locking on PostgreSQL:
tests/services/annotation/test_service.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from services.store import annotators as queue
from services.store import assignments as assign
from services.store import repository as repo
from services.store.accounts import add_annotator
from services.store.db import session_scope
from services.store.errors import (
    InvalidRecord,
    NotAssigned,
    StaleTask,
    TaskAnnotated,
    TaskClosed,
    UnknownAnnotation,
    UnknownAnnotator,
    UnknownTask,
)
from services.store.tasks import QueueConfig

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
RULE = QueueConfig()
FOUR = [("r1", "一"), ("r2", "二"), ("r3", "三"), ("r4", "四")]
TRIPLES = [["r1", "r2", "r3"], ["r2", "r3", "r4"], ["r1", "r3", "r4"]]


@pytest.fixture
def tasks(engine: Engine) -> tuple[str, list[str]]:
    """A prompt of four responses with three triples, and the accounts 甲, 乙, 丙."""
    with session_scope(engine) as s:
        for name in ("甲", "乙", "丙"):
            add_annotator(s, name)
        pid = repo.add_sample(s, "四个回答的问题", FOUR, ["测试"])[0]
        return pid, repo.create_tasks(s, pid, TRIPLES, "triple")


def test_a_listing_assigns_one_task_of_a_prompt_and_lists_it_again(
    engine: Engine, tasks: tuple[str, list[str]]
) -> None:
    _, ids = tasks
    with session_scope(engine) as s:
        [mine] = queue.assign(s, "甲", NOW, RULE)
        assert mine.task.id == ids[0] and mine.contents == {"r1": "一", "r2": "二", "r3": "三"}
        assert queue.holder(s, ids[0]) == "甲"
        assert [q.task.id for q in queue.assign(s, "甲", NOW, RULE)] == [ids[0]]  # theirs, nothing more
        assert [q.task.id for q in queue.assign(s, "乙", NOW, RULE)] == [ids[1]]  # 甲's is not free
        assert queue.assign(s, "丙", NOW, RULE, kind="pair") == []


def test_the_claim_rule(engine: Engine, tasks: tuple[str, list[str]]) -> None:
    pid, ids = tasks
    order = {"order": [["r1"], ["r2"], ["r3"]]}
    with session_scope(engine) as s:
        queue.assign(s, "甲", NOW, RULE)
    with session_scope(engine) as s:
        with pytest.raises(InvalidRecord, match="task_id is required"):
            assign.check_assigned(s, None, pid, "甲")
        with pytest.raises(UnknownTask, match="no task 'nope'"):
            assign.check_assigned(s, "nope", pid, "甲")
        with pytest.raises(NotAssigned, match=f"task {ids[0]} is not assigned to 乙"):
            assign.check_assigned(s, ids[0], pid, "乙")
        with pytest.raises(NotAssigned):
            assign.check_assigned(s, ids[1], pid, "甲")  # free, but never given to them
        assert assign.check_assigned(s, ids[0], pid, "甲").id == ids[0]
        repo.add_annotation(s, "a1", pid, "甲", "human", order, [], ids[0])
        repo.complete_task(s, ids[0])
    with session_scope(engine) as s, pytest.raises(TaskAnnotated, match="by you"):
        assign.check_assigned(s, ids[0], pid, "甲")


def test_a_reassigned_task_is_stale_for_its_holder_and_recorded(engine: Engine, tasks: tuple[str, list[str]]) -> None:
    pid, ids = tasks
    with session_scope(engine) as s:
        queue.assign(s, "甲", NOW, RULE)
        queue.assign(s, "丙", NOW, RULE)  # 丙 holds ids[1]: not independent of the prompt
    with session_scope(engine) as s:
        with pytest.raises(InvalidRecord, match=r"丙 did their share of prompt .* \(annotated or holds its tasks\)"):
            assign.reassign(s, ids[0], "丙", NOW, "person:ops", "甲 left")
        with pytest.raises(UnknownAnnotator):
            assign.reassign(s, ids[0], "nobody", NOW, "person:ops", "甲 left")
        with pytest.raises(InvalidRecord, match="reason"):
            assign.reassign(s, ids[0], "乙", NOW, "person:ops", " ")
    with session_scope(engine) as s:
        assert assign.reassign(s, ids[0], "乙", NOW + timedelta(seconds=1), "person:ops", "甲 left") == "甲"
    with session_scope(engine) as s:
        with pytest.raises(StaleTask):
            assign.check_assigned(s, ids[0], pid, "甲")
        assert assign.check_assigned(s, ids[0], pid, "乙").id == ids[0]
        [row] = assign.corrections(s)
        assert (row.action, row.task_id, row.annotator, row.previous, row.actor) == (
            "reassigned", ids[0], "乙", "甲", "person:ops"
        )  # fmt: skip


def test_a_voided_annotation_stops_counting_and_frees_its_task(engine: Engine, tasks: tuple[str, list[str]]) -> None:
    pid, ids = tasks
    with session_scope(engine) as s:
        queue.assign(s, "甲", NOW, RULE)
        repo.add_annotation(s, "a1", pid, "甲", "human", {"order": [["r1"], ["r2"], ["r3"]]}, [], ids[0])
        repo.complete_task(s, ids[0])
    with session_scope(engine) as s:
        with pytest.raises(TaskClosed):
            assign.reassign(s, ids[0], "乙", NOW, "person:ops", "redo")
        with pytest.raises(UnknownAnnotation):
            assign.void(s, "nope", NOW, "person:ops", "x")
        assert assign.void(s, "a1", NOW, "person:ops", "random orders") == (pid, True)
    with session_scope(engine) as s:
        assert assign.void(s, "a1", NOW, "person:ops", "again") == (pid, False)
        assert repo.annotations_for(s, pid) == []
        assert queue.holder(s, ids[0]) is None and repo.tasks_for(s, pid, "open")[0].id == ids[0]
        assert [q.task.id for q in queue.assign(s, "乙", NOW, RULE)] == [ids[0]]
        assert queue.assign(s, "甲", NOW, RULE) == []  # 甲 annotated the prompt
        assert [c.action for c in assign.corrections(s)] == ["voided"]
