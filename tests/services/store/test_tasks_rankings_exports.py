"""Tasks (idempotent creation, closing), rankings (Chinese round trip, replacement) and export records."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from services.store import repository as repo
from services.store.db import session_scope
from services.store.errors import InvalidRecord, TaskClosed, UnknownResponse, UnknownTask
from services.store.models import Export

TRIPLE = {"order": [["r1"], ["r2", "r3"]]}


def test_tasks_are_created_once_per_prompt_and_keys(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as session:
        [triple] = repo.create_tasks(session, prompt_id, [["r1", "r2", "r3"]], "triple")
        pairs = repo.create_tasks(session, prompt_id, [["r1", "r2"], ["r2", "r3"]], "pair")
    with session_scope(engine) as session:
        assert repo.create_tasks(session, prompt_id, [["r3", "r2", "r1"]], "triple") == [triple]
        assert repo.create_tasks(session, prompt_id, [["r2", "r1"], ["r2", "r3"]], "pair") == pairs
        tasks = repo.tasks_for(session, prompt_id, "open")
    assert sorted(t.id for t in tasks) == sorted([triple, *pairs])
    assert {t.id: t.response_keys for t in tasks}[triple] == ["r1", "r2", "r3"]


@pytest.mark.parametrize(
    ("groups", "kind", "error"),
    [
        ([["r1", "r2", "r3"], ["r1", "r2"]], "triple", InvalidRecord),
        ([["r1", "r2"], ["r1", "r1"]], "pair", InvalidRecord),
        ([["r1", "r2"]], "quad", InvalidRecord),
        ([["r1", "r2"], ["r1", "r9"]], "pair", UnknownResponse),
    ],
)
def test_bad_task_groups_store_no_task(
    engine: Engine,
    prompt_id: str,
    rows: Callable[[], dict[str, int]],
    groups: list[list[str]],
    kind: str,
    error: type[Exception],
) -> None:
    with pytest.raises(error), session_scope(engine) as session:
        repo.create_tasks(session, prompt_id, groups, kind)
    assert rows()["annotation_tasks"] == 0


def test_annotating_then_closing_a_task(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as session:
        [task] = repo.create_tasks(session, prompt_id, [["r1", "r2", "r3"]], "triple")
        assert repo.add_annotation(session, "t-1", prompt_id, "甲", "human", TRIPLE, task_id=task)
    with session_scope(engine) as session:
        assert repo.complete_task(session, task)
        assert not repo.complete_task(session, task)
        assert [t.id for t in repo.tasks_for(session, prompt_id, "done")] == [task]
    with session_scope(engine) as session:
        assert not repo.add_annotation(session, "t-1", prompt_id, "甲", "human", TRIPLE, task_id=task)  # a replay
    with pytest.raises(TaskClosed, match=task), session_scope(engine) as session:
        repo.add_annotation(session, "t-2", prompt_id, "乙", "human", TRIPLE, task_id=task)


def test_task_must_belong_to_the_prompt_and_cover_the_keys(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as session:
        other, _ = repo.add_sample(session, "另一个问题", [("r1", "甲"), ("r2", "乙")], ["闲聊"])
        [foreign] = repo.create_tasks(session, other, [["r1", "r2"]], "pair")
        [pair] = repo.create_tasks(session, prompt_id, [["r1", "r2"]], "pair")
    with pytest.raises(UnknownTask), session_scope(engine) as session:
        repo.add_annotation(session, "x", prompt_id, "甲", "ai", {"better": "r1", "worse": "r2"}, task_id=foreign)
    with pytest.raises(InvalidRecord, match="'r3'"), session_scope(engine) as session:
        repo.add_annotation(session, "x", prompt_id, "甲", "ai", {"better": "r1", "worse": "r3"}, task_id=pair)
    with pytest.raises(UnknownTask), session_scope(engine) as session:
        repo.complete_task(session, "没有这个任务")


def test_ranking_round_trip_in_chinese(engine: Engine) -> None:
    responses = [("回答甲", "北京是中国的首都。"), ("回答乙", "上海是中国的首都。"), ("r3", "首都是北京。")]
    with session_scope(engine) as session:
        pid, _ = repo.add_sample(session, "中国的首都是哪里？", responses, ["常识", "地理"])
        assert repo.get_ranking(session, pid) is None
        repo.save_ranking(session, pid, {"回答甲": 1, "r3": 1, "回答乙": 2}, conflicts=1, merged_nodes=1)
    with session_scope(engine) as session:
        ranking = repo.get_ranking(session, pid)
        assert ranking is not None
        assert (ranking.rank, ranking.conflicts, ranking.merged_nodes) == ({"回答甲": 1, "r3": 1, "回答乙": 2}, 1, 1)
        first = ranking.resolved_at
        repo.save_ranking(session, pid, {"回答甲": 1, "r3": 2, "回答乙": 3})
    with session_scope(engine) as session:
        again = repo.get_ranking(session, pid)
        assert again is not None and again.rank == {"回答甲": 1, "r3": 2, "回答乙": 3} and again.conflicts == 0
        assert again.resolved_at >= first


@pytest.mark.parametrize(("rank", "error"), [({"r1": 0}, InvalidRecord), ({"r9": 1}, UnknownResponse)])
def test_bad_rankings(
    engine: Engine, prompt_id: str, rank: dict[str, int], error: type[Exception], rows: Callable[[], dict[str, int]]
) -> None:
    with pytest.raises(error), session_scope(engine) as session:
        repo.save_ranking(session, prompt_id, rank)
    assert rows()["rankings"] == 0


def test_record_export(engine: Engine) -> None:
    digest = "ab" * 32
    with session_scope(engine) as session:
        first = repo.record_export(session, "bench", "out/bench.jsonl", 120, digest)
        second = repo.record_export(session, "preference", "out/偏好.jsonl", 0, digest)
    assert second > first
    with session_scope(engine) as session:
        row = session.get(Export, second)
        assert row is not None and (row.kind, row.path, row.records) == ("preference", "out/偏好.jsonl", 0)
    with pytest.raises(InvalidRecord, match="sha256"), session_scope(engine) as session:
        repo.record_export(session, "bench", "x", 1, "not-a-digest")
