"""Replicas migrating together (Kubernetes init containers): on PostgreSQL the advisory lock lets one
migrate while the others wait, then find the schema at head and do nothing."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from services.store.db import StoreConfig, create_engine_for
from services.store.migrate import current_revision, head_revision, upgrade
from services.store.models import Base

REPLICAS = 6


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_concurrent_upgrades_of_a_fresh_schema_all_succeed(db_url: str) -> None:
    assert current_revision(db_url) is None
    # Should a replica wedge mid-migration, the server ends its transaction, so the schema can still be dropped.
    url = make_url(db_url)
    options = f"{url.query['options']} -cidle_in_transaction_session_timeout=30s"
    replica_url = url.update_query_dict({"options": options}).render_as_string(hide_password=False)
    start = threading.Barrier(REPLICAS)
    errors: list[BaseException] = []

    def replica() -> None:
        try:
            start.wait(30)
            upgrade(replica_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=replica, daemon=True) for _ in range(REPLICAS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "an upgrade hung"
    assert errors == []
    assert current_revision(db_url) == head_revision()
    engine = create_engine_for(StoreConfig(db_url))
    try:
        with engine.connect() as connection:
            assert connection.scalar(text("SELECT count(*) FROM alembic_version")) == 1
        assert set(inspect(engine).get_table_names()) == {*Base.metadata.tables, "alembic_version"}
    finally:
        engine.dispose()
