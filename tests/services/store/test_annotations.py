"""add_annotation: idempotent on the caller's id, conflicts, unknown keys and tasks refused with nothing stored."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine

from services.store import repository as repo
from services.store.db import session_scope
from services.store.errors import Conflict, InvalidRecord, UnknownPrompt, UnknownResponse

ORDER = {"order": [["r1"], ["r2", "r3"]]}


def add(engine: Engine, annotation_id: str, prompt_id: str, result: dict[str, Any], **kwargs: Any) -> bool:
    with session_scope(engine) as session:
        return repo.add_annotation(session, annotation_id, prompt_id, "标注员甲", "human", result, **kwargs)


def test_same_id_and_content_is_stored_once(engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]) -> None:
    assert add(engine, "a-1", prompt_id, ORDER, discarded=["r3"])
    assert not add(engine, "a-1", prompt_id, {"order": (("r1",), ("r2", "r3"))}, discarded=("r3", "r3"))
    assert rows()["annotations"] == 1
    with session_scope(engine) as session:
        [stored] = repo.annotations_for(session, prompt_id)
    assert (stored.id, stored.result, stored.discarded, stored.kind) == ("a-1", ORDER, ["r3"], "human")


@pytest.mark.parametrize(
    "change",
    [{"result": {"better": "r1", "worse": "r2"}}, {"discarded": ["r2"]}, {"annotator": "标注员乙"}, {"kind": "ai"}],
)
def test_same_id_with_other_content_is_a_conflict(engine: Engine, prompt_id: str, change: dict[str, Any]) -> None:
    add(engine, "a-1", prompt_id, ORDER)
    fields: dict[str, Any] = {"annotator": "标注员甲", "kind": "human", "result": ORDER, "discarded": ()} | change
    with pytest.raises(Conflict, match="'a-1'"), session_scope(engine) as session:
        repo.add_annotation(session, "a-1", prompt_id, **fields)


@pytest.mark.parametrize(
    ("result", "discarded"),
    [({"better": "r1", "worse": "r9"}, []), ({"order": [["r1"], ["r2", "回答九"]]}, []), (ORDER, ["r9"])],
)
def test_unknown_response_key_stores_nothing(
    engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]], result: dict[str, Any], discarded: list[str]
) -> None:
    before = rows()
    with pytest.raises(UnknownResponse, match=r"'r9'|'回答九'"):
        add(engine, "a-1", prompt_id, result, discarded=discarded)
    assert rows() == before and before["annotations"] == 0


def test_unknown_prompt(engine: Engine) -> None:
    with pytest.raises(UnknownPrompt):
        add(engine, "a-1", "0" * 64, ORDER)


@pytest.mark.parametrize(
    ("result", "kind", "message"),
    [
        (ORDER, "robot", "kind"),
        ({"ranking": ["r1"]}, "human", "result"),
        ({"better": "r1", "worse": "r1"}, "human", "twice"),
        ({"equal": ["r1"]}, "ai", r"result\.equal"),
        ({"order": [["r1"], []]}, "human", r"result\.order"),
    ],
)
def test_malformed_annotations_are_refused(
    engine: Engine, prompt_id: str, result: dict[str, Any], kind: str, message: str
) -> None:
    with pytest.raises(InvalidRecord, match=message), session_scope(engine) as session:
        repo.add_annotation(session, "a-1", prompt_id, "judge", kind, result)


def test_ai_judgment_with_a_reason(engine: Engine, prompt_id: str) -> None:
    result = {"better": "r1", "worse": "r2", "reason": "回答一准确，回答二把奖励模型说成了算法。"}
    with session_scope(engine) as session:
        assert repo.add_annotation(session, "j-1", prompt_id, "qwen-judge", "ai", result)
    with session_scope(engine) as session:
        assert repo.annotations_for(session, prompt_id)[0].result == result


def test_a_failed_batch_leaves_nothing_behind(
    engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]
) -> None:
    before = rows()
    with pytest.raises(UnknownResponse), session_scope(engine) as session:
        assert repo.add_annotation(session, "b-1", prompt_id, "甲", "human", ORDER)
        assert repo.add_annotation(session, "b-2", prompt_id, "乙", "ai", {"better": "r2", "worse": "r3"})
        repo.add_annotation(session, "b-3", prompt_id, "丙", "ai", {"better": "r1", "worse": "不存在"})
    assert rows() == before
    assert add(engine, "b-1", prompt_id, ORDER)  # the rolled-back id is free again


def test_concurrent_replays_store_one_row(engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]) -> None:
    created: list[bool] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def replay() -> None:
        start.wait()
        try:
            created.append(add(engine, "race", prompt_id, ORDER))
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            errors.append(exc)

    threads = [threading.Thread(target=replay) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and sorted(created) == [False, False, False, True]
    assert rows()["annotations"] == 1
