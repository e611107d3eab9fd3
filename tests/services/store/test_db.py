"""Config validation, session_scope's commit and rollback, foreign keys and readable Chinese JSON on both backends."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.models import Ranking, Response


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"url": ""}, "url"), ({"url": "不是网址"}, "url"), ({"url": 3}, "url"), ({"echo": "yes"}, "echo")],
)
def test_config_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^StoreConfig\.{field}:"):
        StoreConfig(**kwargs)  # type: ignore[arg-type]


def test_config_defaults_to_a_sqlite_file() -> None:
    assert StoreConfig().url == "sqlite:///cheems.db"
    assert StoreConfig().is_sqlite and not StoreConfig("postgresql+psycopg://u@h/db").is_sqlite


def test_a_new_sqlite_file_is_its_owners_only(tmp_path: Path) -> None:
    before = os.umask(0o022)  # the usual umask: a file SQLite made itself would be 0644
    try:
        engine = create_engine_for(StoreConfig(f"sqlite:///{tmp_path / 'cheems.db'}"))
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE t (x INTEGER)"))
        engine.dispose()
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "cheems.db").stat().st_mode) == 0o600


def test_session_scope_commits(engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]) -> None:
    with session_scope(engine) as session:
        session.add(Ranking(prompt_id=prompt_id, rank={"r1": 1}, conflicts=0, merged_nodes=0))
    assert rows()["rankings"] == 1


def test_session_scope_rolls_back_on_any_exception(
    engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]
) -> None:
    with pytest.raises(KeyboardInterrupt), session_scope(engine) as session:
        session.add(Ranking(prompt_id=prompt_id, rank={"r1": 1}, conflicts=0, merged_nodes=0))
        session.flush()
        raise KeyboardInterrupt
    assert rows()["rankings"] == 0


def test_foreign_keys_are_enforced(engine: Engine, rows: Callable[[], dict[str, int]]) -> None:
    with pytest.raises(IntegrityError), session_scope(engine) as session:
        session.add(Response(prompt_id="没有这个提示", response_key="r1", content="孤儿回答"))
    assert rows()["responses"] == 0


def test_json_keeps_chinese_readable(engine: Engine, prompt_id: str) -> None:
    with engine.connect() as connection:
        raw = connection.execute(text("SELECT CAST(category AS TEXT) FROM prompts")).scalar_one()
    assert "知识问答" in raw
