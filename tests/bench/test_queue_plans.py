"""SQLite's planner, with no statistics (nobody runs ANALYZE on a SQLite file), picks each statement of a listing and
a submit's index from the schema alone: every one must be a search of an index that narrows to the candidates,
never a scan of the task table and never the status index (every open task of the queue). Each statement the queue
sends is captured and explained as sent. (PostgreSQL's plans at the paper's size: bench/queue_plans.py.)"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from queue_plans import captured  # bench/: what the benchmark explains at the paper's size
from sqlalchemy import Engine

from services.annotation.service import AnnotationService
from services.store.accounts import add_annotator
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import Annotation, utcnow
from services.store.tasks import QueueConfig

SEVEN = [(f"r{i}", f"第{i}个回答") for i in range(1, 8)]


def plans(engine: Engine, statements: list[tuple[str, Any]]) -> list[tuple[str, list[str]]]:
    with engine.connect() as connection:
        raw = connection.connection.dbapi_connection
        assert raw is not None
        reads = [(s, p) for s, p in statements if s.lstrip().upper().startswith(("SELECT", "UPDATE", "WITH"))]
        return [(s, [row[3] for row in raw.execute("EXPLAIN QUERY PLAN " + s, p)]) for s, p in reads]


def test_a_listing_and_a_submit_search_indexes_of_the_candidates_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    with session_scope(engine) as s:
        for name in ("甲", "乙"):
            add_annotator(s, name)
    service = AnnotationService(engine, queue=QueueConfig(max_held=2, people_per_prompt=2))
    for n in range(4):
        service.take_sample("", f"第{n}个问题", SEVEN, ["测试"], None, "", [], 3)
    service.assign("乙", now=utcnow() - timedelta(hours=1))  # 乙's tasks: their lease has run out now
    with captured(engine) as statements:
        [first, *_] = service.assign("甲")
        a, b, c = first.contents
        service.submit("a1", first.prompt_id, "甲", "human", {"order": [[a], [b], [c]]}, [], first.task_id)
    with session_scope(engine) as s:
        assert s.get(Annotation, "a1") is not None
    found = plans(engine, statements)
    tasks = [(s, p) for s, p in found if "FROM annotation_tasks" in s or "UPDATE annotation_tasks" in s]
    assert len(tasks) >= 5, found  # the listing's reads, the take, the submit's check and count
    for statement, plan in found:
        assert not any(step.startswith("SCAN annotation_tasks") for step in plan), (statement, plan)
        assert not any("ix_annotation_tasks_status_created_at" in step for step in plan), (statement, plan)
    engine.dispose()
