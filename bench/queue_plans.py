"""The annotation queue's queries at the paper's size: the store filled directly with SQL, then the plans and times of
ListTasks' and SubmitAnnotation's work (`annotators.assign`, `AnnotationService.submit`), as the service runs them.

27,861 prompts of 7 responses, 11 triple-wise tasks each (306,471 tasks), 8 annotator accounts; the first
`--done` prompts already worked by the team under the paper's rule (8 of their 11 triples annotated, one by each
person, 3 left that nobody of the 8 may take: the queue's worst front). Then each annotator in turn lists
(`assign`, max_held 5) and submits what they hold, `--rounds` times; every statement of one listing and one submit
is captured and run again under EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL (EXPLAIN QUERY PLAN on SQLite), in a
transaction rolled back. Prints the plans, then p50/p99/max of the calls (one thread: the store's cost, not
gRPC's; bench/annotation_queue/ measures the service with 8 clients at once).

    python bench/queue_plans.py                                     # PostgreSQL at 127.0.0.1, a schema of its own
    python bench/queue_plans.py --db sqlite:////tmp/queue.db --prompts 3000
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from services.annotation.algorithm.protocol import triple_tasks
from services.annotation.config import QueueConfig
from services.annotation.service import AnnotationService
from services.store.accounts import add_annotator
from services.store.annotators import assign
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
KEYS = [f"r{i}" for i in range(1, 8)]
TRIPLES = triple_tasks(KEYS)  # 11
TEAM = [f"a{n}" for n in range(8)]


def fill(engine: Engine, prompts: int, done: int) -> None:
    """Prompts, responses and tasks with SQL (ids p0..., t0...); the first `done` prompts worked by the team."""
    pg = engine.dialect.name == "postgresql"
    pad = (lambda e, w: f"lpad(({e})::text, {w}, '0')") if pg else (lambda e, w: f"printf('%0{w}d', {e})")
    at = (lambda ms: f"(timestamptz '2026-01-01 00:00:00+00' + ({ms}) * interval '1 millisecond')") if pg else (
        lambda ms: f"(strftime('%Y-%m-%d %H:%M:%S', '2026-01-01', '+' || (({ms}) / 1000) || ' seconds') || '.' || "
        f"printf('%06d', (({ms}) % 1000) * 1000))"
    )  # fmt: skip
    seq = f"WITH RECURSIVE seq(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < {prompts - 1})"
    series = f"generate_series(0, {prompts - 1}) AS seq(n)" if pg else "seq"
    head = "" if pg else seq
    groups = " UNION ALL ".join(f"SELECT {k} AS k, '{str(g).replace(chr(39), chr(34))}' AS keys" for k, g in
                                enumerate(TRIPLES))  # fmt: skip
    rkeys = " UNION ALL ".join(f"SELECT {i} AS i, '{k}' AS key" for i, k in enumerate(KEYS))
    pid, tid = f"'p' || {pad('n', 63)}", f"'t' || {pad('n * 11 + g.k', 63)}"
    js = "::json" if pg else ""  # a text into a JSON column
    statements = [
        f"{head} INSERT INTO prompts (id, text, category, source, created_at) SELECT {pid}, '第' || n || '题',"
        f" '[]'{js}, 'bench', {at('n')} FROM {series}",
        f"{head} INSERT INTO responses (prompt_id, response_key, content) SELECT {pid}, r.key, '回答' || r.key"
        f" FROM {series} CROSS JOIN ({rkeys}) AS r",
        f"{head} INSERT INTO annotation_tasks (id, prompt_id, response_keys, kind, status, created_at, copy)"
        f" SELECT {tid}, {pid}, g.keys{js}, 'triple', CASE WHEN n < {done} AND g.k < 8 THEN 'done' ELSE 'open' END,"
        f" {at('n * 11 + g.k')}, 0 FROM {series} CROSS JOIN ({groups}) AS g",
        f"{head} INSERT INTO task_claims (task_id, annotator, claimed_at) SELECT {tid}, 'a' || g.k, {at('n * 11')}"
        f" FROM {series} CROSS JOIN ({groups}) AS g WHERE n < {done} AND g.k < 8",
        f"{head} INSERT INTO annotations (id, prompt_id, task_id, annotator, kind, result, discarded, created_at)"
        f" SELECT 'x' || {tid}, {pid}, {tid}, 'a' || g.k, 'human', '{{\"order\": [[\"r1\"], [\"r2\"], [\"r3\"]]}}'{js},"
        f" '[]'{js}, {at('n * 11')} FROM {series} CROSS JOIN ({groups}) AS g WHERE n < {done} AND g.k < 8",
        "UPDATE annotation_tasks SET held_by = (SELECT c.annotator FROM task_claims c WHERE c.task_id ="
        " annotation_tasks.id) WHERE status = 'done'",
    ]
    with session_scope(engine) as session:
        for name in TEAM:
            add_annotator(session, name)
    with engine.begin() as connection:
        for statement in statements:
            connection.exec_driver_sql(statement)
        connection.exec_driver_sql("ANALYZE")


@contextmanager
def captured(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """The statements (and parameters) the engine runs inside the block."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def explain(engine: Engine, statements: list[tuple[str, Any]]) -> None:
    """Each statement again, under EXPLAIN (ANALYZE, BUFFERS) (SQLite: EXPLAIN QUERY PLAN), in order, rolled back."""
    pg = engine.dialect.name == "postgresql"
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if pg else "EXPLAIN QUERY PLAN "
    with engine.connect() as connection:
        transaction = connection.begin()
        for statement, parameters in statements:
            if statement.startswith(("BEGIN", "PRAGMA", "SAVEPOINT", "RELEASE")):
                continue
            if statement.startswith("INSERT"):  # one row by its key; run again it would only collide with itself
                print("\n" + " ".join(statement.split())[:200] + "\n  (one row)")
                continue
            rows = connection.exec_driver_sql(prefix + statement, parameters).all()
            print("\n" + " ".join(statement.split())[:400])
            print("\n".join(("  " + str(r[0])) if pg else f"  {r[-1]}" for r in rows))
        transaction.rollback()


def timed(work: Callable[[], Any], into: list[float]) -> Any:
    began = time.perf_counter()
    out = work()
    into.append((time.perf_counter() - began) * 1000)
    return out


def figures(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (
        f"{name:<10} calls {len(ms):>4}  p50 {statistics.median(ms):7.2f} ms  p99 {p99:7.2f} ms  max {ms[-1]:7.2f} ms"
    )


def run(engine: Engine, rounds: int, rule: QueueConfig) -> None:
    service = AnnotationService(engine, queue=rule)
    first: list[float] = []  # each person's first listing: their scan passes the front nobody of them may take
    listings: list[float] = []
    submits: list[float] = []
    shown = {"listing": False, "submit": False}
    now = datetime.now(UTC)
    for round_ in range(rounds):
        for name in TEAM:
            if round_ == 1 and not shown["listing"]:  # a listing as it runs, rolled back, then its plans
                with captured(engine) as statements, Session(engine) as session:
                    count = len(assign(session, name, now, rule))
                    session.rollback()
                print(f"== ListTasks' work ({name}, {count} tasks held, {len(statements)} statements)")
                explain(engine, statements)
                shown["listing"] = True
            with session_scope(engine) as session:
                into = first if round_ == 0 else listings
                held = timed(lambda: assign(session, name, now, rule), into)  # noqa: B023
                work = [(q.task.id, q.task.prompt_id, list(q.task.response_keys)) for q in held]
            for task_id, prompt_id, keys in work:
                order = {"order": [[k] for k in keys]}
                submit = (f"{name}:{task_id}", prompt_id, name, "human", order, list[str](), task_id)
                with captured(engine) as statements:
                    timed(lambda: service.submit(*submit), submits)  # noqa: B023
                if not shown["submit"]:
                    print(f"\n== SubmitAnnotation's work ({len(statements)} statements)")
                    explain(engine, statements)
                    shown["submit"] = True
    print()
    print(figures("1st list", first))
    print(figures("listing", listings))
    print(figures("submit", submits))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=PG, help="a PostgreSQL URL (a schema of its own is made) or a SQLite file")
    parser.add_argument("--prompts", type=int, default=27_861)
    parser.add_argument("--done", type=int, default=10_000, help="prompts the team already worked")
    parser.add_argument("--rounds", type=int, default=6, help="each annotator lists and submits this many times")
    parser.add_argument("--people-per-prompt", type=int, default=0)
    args = parser.parse_args()
    url, schema = args.db, None
    if make_url(url).get_backend_name() == "postgresql":
        schema = f"queue_plans_{uuid.uuid4().hex[:8]}"
        admin = create_engine(url, poolclass=NullPool)
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(url).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(False)
    try:
        upgrade(url)
        engine = create_engine_for(StoreConfig(url))
        began = time.perf_counter()
        fill(engine, args.prompts, args.done)
        print(f"filled {args.prompts} prompts, {args.prompts * 11} tasks ({args.done} prompts worked) in "
              f"{time.perf_counter() - began:.1f} s on {engine.dialect.name}")  # fmt: skip
        run(engine, args.rounds, QueueConfig(people_per_prompt=args.people_per_prompt))
        engine.dispose()
    finally:
        if schema is not None:
            with admin.begin() as connection:
                connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()


if __name__ == "__main__":
    main()
