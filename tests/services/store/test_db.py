"""Config validation, session_scope's commit and rollback, read_scope (never behind a writer, refuses writes), SQLite's
WAL mode and private files, foreign keys and readable Chinese JSON on both backends."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from services.store.db import StoreConfig, create_engine_for, read_scope, session_scope
from services.store.models import Prompt, Ranking, Response


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


def test_a_new_sqlite_file_and_its_wal_are_their_owners_only(tmp_path: Path) -> None:
    before = os.umask(0o022)  # the usual umask: a file SQLite made itself would be 0644
    try:
        engine = create_engine_for(StoreConfig(f"sqlite:///{tmp_path / 'cheems.db'}"))
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE t (x INTEGER)"))
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
            made = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}  # -wal, -shm live now
        engine.dispose()
    finally:
        os.umask(before)
    assert made == {"cheems.db": 0o600, "cheems.db-wal": 0o600, "cheems.db-shm": 0o600}


def test_a_read_never_waits_behind_a_writer_and_refuses_to_write(
    engine: Engine, prompt_id: str, rows: Callable[[], dict[str, int]]
) -> None:
    with session_scope(engine) as writer:  # a writer holding its transaction (on SQLite: the write lock)
        writer.add(Ranking(prompt_id=prompt_id, rank={"r1": 1}, conflicts=0, merged_nodes=0))
        writer.flush()
        read: list[int] = []
        reader = threading.Thread(target=lambda: read.append(count_prompts(engine)))
        reader.start()
        reader.join(10)  # bounded: SQLite's busy timeout (30 s) would be the wait behind the writer
        assert read == [1]  # the committed prompt, not the writer's ranking
    with pytest.raises(DBAPIError, match=r"readonly|read-only"), read_scope(engine) as session:  # a valid write fails
        session.add(Prompt(id=PROMPT_TWO, text="另一题", category=[], source="测试"))
    assert rows()["rankings"] == 1 and rows()["prompts"] == 1


PROMPT_TWO = "0" * 64


def count_prompts(engine: Engine) -> int:
    with read_scope(engine) as session:
        return int(session.scalar(select(func.count()).select_from(Prompt)) or 0)


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
