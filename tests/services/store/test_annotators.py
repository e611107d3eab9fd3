"""Task claims in the store (SQLite and PostgreSQL): one holder per task, the annotator's own task first, a lease
after which a task may go to someone else, a prompt's triples to different annotators, and the two annotations of
a doubled triple. The accounts themselves: test_accounts.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from services.store import annotators as queue
from services.store import repository as repo
from services.store.accounts import add_annotator
from services.store.db import session_scope
from services.store.errors import InvalidRecord
from services.store.models import AnnotationTask
from services.store.tasks import open_tasks
from services.store.validate import task_id_for

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
LEASE = timedelta(minutes=30)


def test_claims_give_each_task_to_one_annotator_until_the_lease_ends(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as s:
        for name in ("甲", "乙"):
            add_annotator(s, name)
        other = repo.add_sample(s, "第二个问题", [("a", "一"), ("b", "二"), ("c", "三")], ["测试"])[0]
        [first] = repo.create_tasks(s, prompt_id, [["r1", "r2", "r3"]], "triple")
        [second] = repo.create_tasks(s, other, [["a", "b", "c"]], "triple")
        repo.create_tasks(s, other, [["a", "b"]], "pair")  # pairs are the AI judge's, never claimed here
    with session_scope(engine) as s:
        mine = queue.claim_next(s, "甲", NOW, LEASE)
        assert mine is not None and mine.task.id == first and mine.contents["r1"].startswith("奖励模型")
        theirs = queue.claim_next(s, "乙", NOW, LEASE)
        assert theirs is not None and theirs.task.id == second
        assert queue.claim_next(s, "乙", NOW, LEASE).task.id == second  # type: ignore[union-attr]  # theirs again
        assert queue.queue_size(s, NOW, LEASE) == (2, 0)
        assert queue.open_claims(s) == {"甲": 1, "乙": 1}
    with session_scope(engine) as s:
        repo.complete_task(s, second)
    with session_scope(engine) as s:
        assert queue.claim_next(s, "乙", NOW + LEASE / 2, LEASE) is None  # 甲 still holds the other
        later = NOW + LEASE + timedelta(seconds=1)
        assert queue.queue_size(s, later, LEASE) == (1, 1)
        taken = queue.claim_next(s, "乙", later, LEASE)
        assert taken is not None and taken.task.id == first
        assert queue.holder(s, first) == "乙" and queue.ever_held(s, first, "甲")
        assert not queue.ever_held(s, second, "甲")
        assert queue.claim_next(s, "甲", later, LEASE) is None  # no longer theirs, nothing free
        assert queue.open_claims(s) == {"乙": 1}


FOUR = [("r1", "一"), ("r2", "二"), ("r3", "三"), ("r4", "四")]
TRIPLES = [["r1", "r2", "r3"], ["r2", "r3", "r4"], ["r1", "r3", "r4"], ["r1", "r2", "r4"]]


def annotate(s: Session, task_id: str, name: str, kind: str = "human") -> None:
    task = s.get(AnnotationTask, task_id)
    assert task is not None
    order = {"order": [[k] for k in task.response_keys]}
    repo.add_annotation(s, f"{name}:{task_id}", task.prompt_id, name, kind, order, [], task_id)
    repo.complete_task(s, task_id)


def test_no_annotator_gets_two_triples_of_a_prompt_they_annotated_or_hold(engine: Engine) -> None:
    with session_scope(engine) as s:
        for name in ("甲", "乙", "丙"):
            add_annotator(s, name)
        prompt = repo.add_sample(s, "四个回答的题", FOUR, ["测试"])[0]
        tasks = repo.create_tasks(s, prompt, TRIPLES, "triple")
    with session_scope(engine) as s:
        first = queue.claim_next(s, "甲", NOW, LEASE)
        assert first is not None and first.task.prompt_id == prompt
        assert queue.withheld(s, "甲", NOW, LEASE) == 3  # the prompt's other triples: for others
        assert {q.task.id for q in open_tasks(s, annotator="甲")} == set()  # holds one: none listed either
        assert len(open_tasks(s, annotator="乙")) == 4 and len(open_tasks(s)) == 4
        annotate(s, first.task.id, "甲")
        later = repo.add_sample(s, "后来的题", FOUR[:3], ["测试"])[0]
        [other] = repo.create_tasks(s, later, [["r1", "r2", "r3"]], "triple")
    with session_scope(engine) as s:
        assert queue.claim_next(s, "甲", NOW, LEASE).task.id == other  # type: ignore[union-attr]  # not the older
        annotate(s, other, "甲")
        assert queue.claim_next(s, "甲", NOW, LEASE) is None and queue.withheld(s, "甲", NOW, LEASE) == 3
        assert open_tasks(s, annotator="甲") == []  # gRPC ListTasks: an empty list
        second = queue.claim_next(s, "乙", NOW, LEASE)
        assert second is not None and second.task.id in tasks and second.task.id != first.task.id
    later_on = NOW + LEASE + timedelta(seconds=1)
    with session_scope(engine) as s:  # 乙's lease ran out and 丙 took the task: 乙 holds none of the prompt now
        assert queue.claim_next(s, "丙", later_on, LEASE).task.id == second.task.id  # type: ignore[union-attr]
        third = queue.claim_next(s, "乙", later_on, LEASE)
        assert third is not None and third.task.prompt_id == prompt and third.task.id != second.task.id
        annotate(s, third.task.id, "丁", kind="ai")  # an AI judgment under a name binds nobody
        assert {q.task.id for q in open_tasks(s, annotator="丁")} == set(tasks) - {first.task.id, third.task.id}
        with pytest.raises(InvalidRecord, match="annotator"):
            open_tasks(s, annotator="x" * 200)


def test_a_doubled_triple_has_its_own_id_and_its_two_annotations_are_paired(engine: Engine, prompt_id: str) -> None:
    keys = ["r1", "r2", "r3"]
    with session_scope(engine) as s:
        [original] = repo.create_tasks(s, prompt_id, [keys], "triple")
        [copy] = repo.create_tasks(s, prompt_id, [keys], "triple", copy=1)
        assert original == task_id_for(prompt_id, keys) != copy  # copy 0 keeps the id it always had
        assert repo.create_tasks(s, prompt_id, [keys], "triple", copy=1) == [copy]  # idempotent
        with pytest.raises(InvalidRecord, match="copy"):
            repo.create_tasks(s, prompt_id, [keys], "triple", copy=-1)
        stored = s.get(AnnotationTask, copy)
        assert stored is not None and (stored.copy, stored.response_keys) == (1, keys)
        other = repo.add_sample(s, "另一题", FOUR[:3], ["测试"])[0]
        [alone, _] = repo.create_tasks(s, other, [keys], "triple") + repo.create_tasks(s, other, [keys], "triple", 1)
        annotate(s, alone, "丙")  # its copy is still open: not paired yet
        annotate(s, copy, "乙")
        assert queue.doubled_annotations(s) == []
        annotate(s, original, "甲")
    with session_scope(engine) as s:
        [(a, b)] = queue.doubled_annotations(s)
        assert (a.annotator, a.task_id, b.annotator, b.task_id) == ("甲", original, "乙", copy)
