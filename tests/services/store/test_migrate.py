"""Migrations: they create exactly the tables and columns of models.py, and running them again changes nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import make_url

from services.store import registry
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.errors import InvalidRecord
from services.store.migrate import current_revision, head_revision, upgrade, upgrade_sql
from services.store.models import Base
from services.store.outbox import StoreOutbox


def test_migration_creates_the_model_tables_and_columns(db_url: str) -> None:
    assert current_revision(db_url) is None
    upgrade(db_url)
    engine = create_engine_for(StoreConfig(db_url))
    try:
        inspector = inspect(engine)
        tables = set(inspector.get_table_names()) - {"alembic_version"}
        assert tables == set(Base.metadata.tables)
        for name, table in Base.metadata.tables.items():
            assert [c["name"] for c in inspector.get_columns(name)] == [c.name for c in table.columns], name
        assert _differences(engine) == []
    finally:
        engine.dispose()


def _differences(engine: Engine) -> list[object]:
    """What Alembic's autogenerate would still add or change to make the database match models.py."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


def test_upgrade_is_idempotent_and_reaches_head(db_url: str) -> None:
    upgrade(db_url)
    upgrade(db_url)
    assert current_revision(db_url) == head_revision() == "0014"


def test_runs_stored_before_0003_get_five_ece_bins(db_url: str) -> None:
    upgrade(db_url, "0002")
    engine = create_engine_for(StoreConfig(db_url))
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO eval_runs (id, bench_files, scorer_url, semantics, items_total, state, created_at)"
                    " VALUES ('old', '[]', 'h:1', 'paper', 0, 'running', CURRENT_TIMESTAMP)"
                )
            )
        upgrade(db_url)
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT ece_bins FROM eval_runs WHERE id = 'old'")) == 5
    finally:
        engine.dispose()


def test_events_queued_before_0012_are_relayed_untraced(db_url: str) -> None:
    upgrade(db_url, "0011")
    engine = create_engine_for(StoreConfig(db_url))
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO outbox (topic, key, value, created_at)"
                    " VALUES ('cheems.samples.v1', 'p1', :value, CURRENT_TIMESTAMP)"
                ),
                {"value": b"old"},
            )
        upgrade(db_url)
        (waiting,) = StoreOutbox(engine).take(10)
        assert (waiting.key, waiting.value, waiting.trace_context) == ("p1", b"old", {})
    finally:
        engine.dispose()


def test_trainings_and_models_stored_before_0013_were_reported_nowhere_known(db_url: str) -> None:
    upgrade(db_url, "0012")
    engine = create_engine_for(StoreConfig(db_url))
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO datasets (id, recipe, path, prompts, pairs, rankings, created_at) VALUES"
                    f" ('{'d' * 64}', 'human', 'd.jsonl', 1, 1, 1, CURRENT_TIMESTAMP)"
                )
            )
            connection.execute(
                text(
                    "INSERT INTO trainings (id, dataset_id, recipe, overrides, state, launcher, out_dir, step,"
                    f" total_steps, created_at, updated_at) VALUES ('t1', '{'d' * 64}', 'tiny-cpu', '{{}}', 'running',"
                    " 'local', 'out/t1', 2, 9, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                )
            )
        upgrade(db_url)
        with session_scope(engine) as session:
            assert registry.get_training(session, "t1").tracking is None
            with pytest.raises(InvalidRecord, match="tracking"):
                registry.update_training(session, "t1", tracking=["not", "an", "object"])
            registry.update_training(session, "t1", tracking={"tensorboard": "/out/t1/tensorboard", "mlflow": "ab"})
            model, _ = registry.register_model(session, "t1", "out/t1/model", None)
            assert model.tracking == {"tensorboard": "/out/t1/tensorboard", "mlflow": "ab"}  # the training's runs
        with session_scope(engine) as session:
            assert registry.get_model(session, "rm-t1").tracking == {
                "tensorboard": "/out/t1/tensorboard",
                "mlflow": "ab",
            }
    finally:
        engine.dispose()


def test_open_tasks_claimed_before_0014_keep_their_newest_claims_holder(db_url: str) -> None:
    upgrade(db_url, "0013")
    engine = create_engine_for(StoreConfig(db_url))
    at = "CURRENT_TIMESTAMP"
    rows = [
        *(f"INSERT INTO annotators (name, token_sha256, active, created_at, role) VALUES ('{n}', '{n * 64}', TRUE,"
          f" {at}, 'annotator')" for n in ("a", "b")),
        f"INSERT INTO prompts (id, text, category, source, created_at) VALUES ('p', '题', '[]', '', {at})",
        *(f"INSERT INTO annotation_tasks (id, prompt_id, response_keys, kind, status, created_at, copy) VALUES"
          f" ('{t}', 'p', '[\"r1\", \"r2\", \"r3\"]', 'triple', '{state}', {at}, 0)"
          for t, state in (("open", "open"), ("done", "done"), ("free", "open"))),
        "INSERT INTO task_claims (task_id, annotator, claimed_at) VALUES ('open', 'a', '2026-03-01 09:00:00')",
        "INSERT INTO task_claims (task_id, annotator, claimed_at) VALUES ('open', 'b', '2026-03-01 09:05:00')",
        "INSERT INTO task_claims (task_id, annotator, claimed_at) VALUES ('done', 'a', '2026-03-01 09:00:00')",
    ]  # fmt: skip
    try:
        with engine.begin() as connection:
            for row in rows:
                connection.execute(text(row))
        upgrade(db_url)
        with engine.connect() as connection:
            held = connection.execute(text("SELECT id, held_by, held_at FROM annotation_tasks ORDER BY id")).all()
        assert [(t, by) for t, by, _ in held] == [("done", None), ("free", None), ("open", "b")]
        assert str(held[2][2]).startswith("2026-03-01 09:05:00")  # the newest claim's time: the lease runs on
    finally:
        engine.dispose()


def test_offline_sql_creates_every_table(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    upgrade_sql(db_url)
    sql = capsys.readouterr().out
    for name in Base.metadata.tables:
        assert f"CREATE TABLE {name}" in sql


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_upgrade_logs_the_url_without_its_password(db_url: str) -> None:
    """PostgreSQL here trusts local connections, so a URL with any password connects."""
    url = make_url(db_url).set(password="SECRETPW").render_as_string(hide_password=False)
    cmd = [sys.executable, "-m", "services.store.migrate", "upgrade", url]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "SECRETPW" not in run.stdout + run.stderr
    assert "store at postgresql+psycopg://postgres:***@127.0.0.1" in run.stderr
    assert current_revision(db_url) == head_revision()
