"""add_sample: content-hash prompt ids, idempotent writes, new response keys only, conflicting content refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine

from services.store import repository as repo
from services.store.db import session_scope
from services.store.errors import Conflict, InvalidRecord
from services.store.models import Prompt

PROMPT = "请用一句话解释什么是奖励模型。"  # the sample that conftest's `prompt_id` fixture stores
RESPONSES = [
    ("r1", "奖励模型给回答打分，分数越高越符合人类偏好。"),
    ("r2", "奖励模型是一种强化学习算法。"),
    ("r3", "不知道。"),
]


def test_prompt_id_is_the_hash_of_system_prompt_and_text() -> None:
    pid = repo.prompt_id_for(PROMPT)
    assert len(pid) == 64 and int(pid, 16) >= 0
    assert repo.prompt_id_for(PROMPT) == pid
    assert repo.prompt_id_for(PROMPT, "你是一个助手。") != pid
    assert repo.prompt_id_for(PROMPT, "") != pid  # no system prompt differs from an empty one


def test_adding_the_same_sample_again_stores_nothing(
    engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]
) -> None:
    before = rows()
    with session_scope(engine) as session:
        assert repo.add_sample(session, PROMPT, RESPONSES, ["知识问答", "人工智能"]) == (prompt_id, False)
    assert rows() == before == {**before, "prompts": 1, "responses": 3}


def test_a_new_response_set_adds_only_the_new_keys(engine: Engine, prompt_id: str) -> None:
    more = [RESPONSES[0], ("r4", "奖励模型是用来评价回答好坏的模型。")]
    with session_scope(engine) as session:
        assert repo.add_sample(session, PROMPT, more, ["别的类别"], models={"r4": "qwen2-7b"}) == (prompt_id, True)
    with session_scope(engine) as session:
        assert list(repo.responses_for(session, prompt_id)) == ["r1", "r2", "r3", "r4"]
        prompt = session.get(Prompt, prompt_id)
        assert prompt is not None and prompt.category == ["知识问答", "人工智能"]  # kept as first stored


def test_other_content_under_a_known_key_is_a_conflict(
    engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]
) -> None:
    before = rows()
    with pytest.raises(Conflict, match="'r2'"), session_scope(engine) as session:
        repo.add_sample(session, PROMPT, [("r4", "新的回答"), ("r2", "改过的内容")], ["知识问答"])
    assert rows() == before


def test_system_prompt_makes_another_prompt(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as session:
        pid, created = repo.add_sample(session, PROMPT, RESPONSES, ["知识问答"], system_prompt="你是一个助手。")
        assert created and pid != prompt_id
        prompt = session.get(Prompt, pid)
        assert prompt is not None and prompt.system_prompt == "你是一个助手。"


@pytest.mark.parametrize(
    ("responses", "category", "message"),
    [
        ([("r1", "甲"), ("r1", "乙")], ["类别"], "given twice"),
        ([("", "甲")], ["类别"], r"responses\[0\]\.key"),
        ([("r1", "甲")], "类别", "category"),
    ],
)
def test_bad_samples_raise_before_writing(
    engine: Engine,
    rows: Callable[[], dict[str, int]],
    responses: list[tuple[str, str]],
    category: list[str],
    message: str,
) -> None:
    with pytest.raises(InvalidRecord, match=message), session_scope(engine) as session:
        repo.add_sample(session, "问题", responses, category)
    assert sum(rows().values()) == 0
