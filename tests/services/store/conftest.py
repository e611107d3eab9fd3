"""Store fixtures on top of tests/conftest.py's `engine` (SQLite and PostgreSQL): a stored sample, row counts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, func, select

from services.store import repository as repo
from services.store.db import session_scope
from services.store.models import Base

PROMPT = "请用一句话解释什么是奖励模型。"
RESPONSES = [
    ("r1", "奖励模型给回答打分，分数越高越符合人类偏好。"),
    ("r2", "奖励模型是一种强化学习算法。"),
    ("r3", "不知道。"),
]
CATEGORY = ["知识问答", "人工智能"]


@pytest.fixture
def prompt_id(engine: Engine) -> str:
    """A stored Chinese prompt with responses r1, r2, r3."""
    with session_scope(engine) as session:
        pid, created = repo.add_sample(session, PROMPT, RESPONSES, CATEGORY, source="测试")
    assert created
    return pid


@pytest.fixture
def rows(engine: Engine) -> Callable[[], dict[str, int]]:
    """rows() -> {table: number of rows}, for checking that nothing was stored (the `production` alias row, which
    the migration makes, is not counted)."""

    def count() -> dict[str, int]:
        with engine.connect() as connection:
            found = {
                t.name: connection.scalar(select(func.count()).select_from(t)) or 0 for t in Base.metadata.sorted_tables
            }
        found["model_aliases"] -= 1
        return found

    return count
