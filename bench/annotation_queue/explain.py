"""What the database does for one ListTasks and one SubmitAnnotation: each statement the server's engine sends
while `capture.during(label)` is open is explained on the statement's own connection, in its transaction, just
before it runs, so the plan is that of the state the statement meets.

    capture = Capture(engine)                 # before_cursor_execute on the server's engine (in-process)
    with capture.during("ListTasks"): stub.ListTasks(...)
    capture.plans    # [{"rpc", "statement", "parameters", "plan": [lines], "ms", "count", "ran_ms"}]

On PostgreSQL: EXPLAIN (ANALYZE, BUFFERS) inside a savepoint rolled back at once, so the statement runs twice
(writes included) and only the second one counts; `ms` is the plan's Execution Time. On SQLite: EXPLAIN QUERY
PLAN (nothing runs; `ms` None). A statement sent again with other parameters (one a task) is counted, its first
plan kept; `ran_ms` is the time the statement itself took, all its sends together, on both databases.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

EXPLAINED = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")
EXECUTION = re.compile(r"Execution Time: ([0-9.]+) ms")
TIMED = "bench_explain_timed"  # connection.info: the statement being timed


class Capture:
    def __init__(self, engine: Engine) -> None:
        self.engine, self.label = engine, ""
        self.plans: list[dict[str, Any]] = []
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    @contextmanager
    def during(self, label: str) -> Iterator[None]:
        self.label = label
        try:
            yield
        finally:
            self.label = ""

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._before)
        event.remove(self.engine, "after_cursor_execute", self._after)

    def _before(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if not self.label or many or not statement.lstrip().upper().startswith(EXPLAINED):
            return
        entry = next((p for p in self.plans if p["rpc"] == self.label and p["statement"] == statement), None)
        if entry is None:
            plan = explain(conn.dialect.name, cursor, statement, parameters)
            ms = next((float(m.group(1)) for line in plan if (m := EXECUTION.search(line))), None)
            entry = {"rpc": self.label, "statement": statement, "parameters": repr(parameters), "plan": plan}
            self.plans.append(entry := entry | {"ms": ms, "count": 0, "ran_ms": 0.0})
        entry["count"] += 1
        conn.info[TIMED] = (entry, time.perf_counter())  # the statement itself, timed from here (the plan taken)

    def _after(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if (timed := conn.info.pop(TIMED, None)) is not None:
            timed[0]["ran_ms"] += (time.perf_counter() - timed[1]) * 1000


def explain(dialect: str, cursor: Any, statement: str, parameters: Any) -> list[str]:
    """The plan's lines, by the DB-API cursor the statement is about to run on (no SQLAlchemy event again)."""
    if dialect != "postgresql":
        cursor.execute("EXPLAIN QUERY PLAN " + statement, parameters)
        return [str(row[-1]) for row in cursor.fetchall()]
    cursor.execute("SAVEPOINT bench_explain")
    try:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
        return [str(row[0]) for row in cursor.fetchall()]
    except Exception as e:  # a plan that cannot be taken says why; the statement itself still runs
        return [f"(not explained: {e!r})"]
    finally:
        cursor.execute("ROLLBACK TO SAVEPOINT bench_explain")
        cursor.execute("RELEASE SAVEPOINT bench_explain")


def slowest(plans: list[dict[str, Any]], rpc: str, count: int = 3) -> list[dict[str, Any]]:
    """The `count` statements of `rpc` that took longest, all their sends together (`ran_ms`)."""
    return sorted((p for p in plans if p["rpc"] == rpc), key=lambda p: -p["ran_ms"])[:count]
