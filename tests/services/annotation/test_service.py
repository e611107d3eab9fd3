"""AnnotationService on the store (SQLite and PostgreSQL), without a server: the rule filter before tasks are made
(a rejected response is in no task, its reason stored), and double annotation, where a share of a prompt's
triples gets a second task (copy 1) and the prompt is resolved only once both copies are done; on PostgreSQL a
void takes the prompt's lock first, as a submit does, and of two voids at once the second records nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select, text

from services.annotation.algorithm.doubles import DoublingConfig, doubled
from services.annotation.algorithm.filters import FilterConfig
from services.annotation.config import TaskConfig
from services.annotation.service import AnnotationService
from services.store import repository
from services.store.assignments import corrections, void
from services.store.db import session_scope
from services.store.filtered import filtered
from services.store.models import AnnotationTask, utcnow
from services.store.tasks import lock_prompt
from tests.services.accounts import give

RESPONSES = [(f"r{i}", f"第{i}个回答") for i in range(1, 6)]


def test_a_share_of_the_triples_gets_a_second_task_and_resolution_waits_for_it(engine: Engine) -> None:
    with session_scope(engine) as session:
        prompt, _ = repository.add_sample(session, "比较这五个回答", RESPONSES, ["推理"])
    assert len(AnnotationService(engine).create_tasks(prompt)) == 5  # no doubling by default
    config = DoublingConfig(share=0.5, seed=3)
    service = AnnotationService(engine, tasks=TaskConfig(doubling=config))
    tasks = service.create_tasks(prompt)
    originals, copies = tasks[:5], tasks[5:]
    assert [keys for tid, keys in originals if doubled(tid, config)] == [keys for _, keys in copies]
    assert 0 < len(copies) < 5  # this seed doubles some, not all (a share of 0.5 of five)
    assert not {tid for tid, _ in copies} & {tid for tid, _ in originals}
    assert service.create_tasks(prompt) == tasks  # idempotent: the same ids, nothing new
    with session_scope(engine) as session:
        stored = {
            t.id: t.copy for t in session.scalars(select(AnnotationTask).where(AnnotationTask.prompt_id == prompt))
        }
    assert stored == {tid: 0 for tid, _ in originals} | {tid: 1 for tid, _ in copies}
    for n, (tid, keys) in enumerate(tasks):
        assert service.ranking(prompt) is None  # resolved only when the last task, a copy or not, is done
        give(engine, f"annotator-{n}", tid)
        service.submit(f"a{n}", prompt, f"annotator-{n}", "human", {"order": [[k] for k in sorted(keys)]}, [], tid)
    resolved = service.ranking(prompt)
    assert resolved is not None and resolved.rank == {f"r{i}": i for i in range(1, 6)}


def test_pairs_for_the_ai_judge_are_never_doubled(engine: Engine) -> None:
    with session_scope(engine) as session:
        prompt, _ = repository.add_sample(session, "两两比较", RESPONSES[:3], ["推理"])
    everything = TaskConfig(doubling=DoublingConfig(share=1.0))
    assert len(AnnotationService(engine, tasks=everything).create_tasks(prompt, 2)) == 3


GARBLED = "This response switched to English entirely and never came back to Chinese at all."
CODE = (
    "用内置函数即可：\n\n```python\ndef quick_sort(items):\n    return sorted(items)\n```\n平均复杂度 $O(n \\log n)$。"
)


def test_the_rule_filter_keeps_abnormal_responses_out_of_every_task(engine: Engine) -> None:
    responses = [("r1", "第一个回答"), ("r2", GARBLED), ("r3", CODE), ("r4", "好" * 130), ("r5", "第五个回答")]
    service = AnnotationService(engine, tasks=TaskConfig(rule_filter=FilterConfig(max_chars=120)))
    prompt, tasks = service.take_sample("", "快速排序怎么写？", responses, ["代码"], None, "test", [], 3)
    assert {k for _, keys in tasks for k in keys} == {"r1", "r3", "r5"}  # code in a Chinese answer is kept
    assert len(tasks) == 1 and len(service.create_tasks(prompt, 2)) == 3  # the AI judge's pairs too
    with session_scope(engine) as session:
        assert [(f.key, f.reason) for f in filtered(session, prompt)] == [
            ("r2", "non_chinese<0.3"),
            ("r4", "too_long>120"),
        ]
        assert repository.responses_for(session, prompt)["r2"] == GARBLED  # stored, only not annotated
    give(engine, "甲", tasks[0][0])
    service.submit("a1", prompt, "甲", "human", {"order": [["r1"], ["r3"], ["r5"]]}, [], tasks[0][0])
    assert set(service.resolve(prompt).rank) == {"r1", "r3", "r5"}  # (the pairs are still open)


def test_the_rule_filter_is_on_by_default_and_can_be_turned_off(engine: Engine) -> None:
    responses = [("r1", "第一个回答"), ("r2", GARBLED), ("r3", "第三个回答"), ("r4", "第四个回答")]
    prompt, tasks = AnnotationService(engine).take_sample("", "问题", responses, [], None, "test", [], 3)
    assert "r2" not in {k for _, keys in tasks for k in keys}
    unfiltered = AnnotationService(engine, tasks=TaskConfig(rule_filter=None))
    assert "r2" in {k for _, keys in unfiltered.create_tasks(prompt) for k in keys}
    with session_scope(engine) as session:
        assert filtered(session, prompt) == []  # the verdicts follow the rules in force


def test_a_prompt_left_with_fewer_than_two_responses_gets_no_task(engine: Engine) -> None:
    service = AnnotationService(engine)
    prompt, tasks = service.take_sample(
        "", "问题", [("r1", "好的回答"), ("r2", GARBLED), ("r3", " ")], [], None, "t", [], 3
    )
    assert tasks == [] and service.open_tasks(prompt) == []
    with session_scope(engine) as session:
        assert {f.key: f.reason for f in filtered(session, prompt)} == {"r2": "non_chinese<0.3", "r3": "too_short<1"}


def voidable(engine: Engine) -> tuple[str, str]:
    """(prompt, annotation id) of a stored human annotation of 甲, its task done."""
    with session_scope(engine) as session:
        prompt, _ = repository.add_sample(session, "作废的题", RESPONSES[:3], ["推理"])
    service = AnnotationService(engine)
    [(task, keys)] = service.create_tasks(prompt)
    give(engine, "甲", task)
    assert service.submit("a1", prompt, "甲", "human", {"order": [[k] for k in keys]}, [], task)
    return prompt, "a1"


def waiting_on(engine: Engine, pid: int, timeout: float = 30.0) -> None:
    """Until another connection waits for a lock the backend `pid` holds.

    Each poll is a transaction of its own: PostgreSQL reads pg_stat_activity once per transaction, so a watcher that
    polled inside one would never see a backend that began waiting after its first look.
    """
    deadline = time.monotonic() + timeout
    with engine.connect() as watcher:
        query = text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))")
        while not watcher.scalar(query, {"pid": pid}):
            watcher.rollback()
            assert time.monotonic() < deadline, "nobody waited for the lock"
            time.sleep(0.05)


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(value=work()), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_void_takes_the_prompts_lock_before_any_row_as_a_submit_does(engine: Engine) -> None:
    prompt, annotation = voidable(engine)
    service = AnnotationService(engine)
    with session_scope(engine) as holding:  # a submit to the prompt under way: its lock held
        lock_prompt(holding, prompt)
        pid = holding.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
        thread, out = in_thread(lambda: service.void(annotation, "person:ops", "random orders"))
        waiting_on(engine, pid)
        with engine.connect() as other:  # the waiting void has locked no row of the annotation or its task
            row = text("SELECT id FROM annotations WHERE id = :id FOR UPDATE NOWAIT")
            assert other.execute(row, {"id": annotation}).scalar() == annotation
            other.rollback()
    thread.join(30)
    assert out["value"] == (prompt, True)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_of_two_voids_at_once_the_second_records_nothing(engine: Engine) -> None:
    prompt, annotation = voidable(engine)
    service = AnnotationService(engine)
    with session_scope(engine) as first:
        assert void(first, annotation, utcnow(), "person:ops", "first") == (prompt, True)
        pid = first.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
        thread, out = in_thread(lambda: service.void(annotation, "person:admin", "second"))
        waiting_on(engine, pid)
    thread.join(30)
    assert out["value"] == (prompt, False)
    with session_scope(engine) as session:
        assert [(c.action, c.reason) for c in corrections(session)] == [("voided", "first")]
