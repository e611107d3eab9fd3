"""The annotation queue under a team (issue 43): 8 annotators listing and submitting at once over gRPC, on a queue of
3,000 and of the paper's 27,861 prompts x 7 responses (11 triple tasks a prompt: 306,471 tasks at the paper's size).

For each size in `--prompts`: a fresh database of the bench's own (PostgreSQL: `--database` made on the `--pg-url`
server and dropped afterwards; `--db sqlite`: a file in a temporary folder), migrated, filled in bulk with the
rows the annotation service writes (`annotation_queue/fill.py`; the fill's seconds are printed), `--annotators`
annotator accounts with tokens, then the real annotation gRPC server (`services.annotation.server.host`, in this
process, its default handler threads) and one client process per annotator (`annotation_queue/annotators.py` run as
a module: processes, not threads, so the clients' Python does not contend for one interpreter lock on two cores).
Each annotator, for `--seconds` (or until it stored `--annotations`): ListTasks as itself (`--limit`, 20 as issue
43 measured), then SubmitAnnotation of each task listed with a random valid order, each call under a `--deadline`;
back to back (the most load a team can make: the latency is then mostly waiting for the server's CPU), or after
`--think` seconds of reading each task. `--done 0.5`: half the prompts (the oldest) annotated before the run, so
the queue is measured as annotations accumulate (a minute's run adds only a few thousand).

Prints per RPC the calls, p50/p90/p99/max latency, errors by status and the p99 in each third of the run (flat as
the queue drains and annotations accumulate?), the team's annotations/s, the load average and where the CPU went
(the machine is shared: `annotation_queue/machine.py`), and the checks read in the store afterwards: no task
annotated twice, none listed to two annotators, no prompt annotated twice by one person
(`annotation_queue/checks.py`). `--explain` adds the plans of the statements of one more ListTasks and
SubmitAnnotation of the first annotator after the run (EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL, EXPLAIN QUERY PLAN
on SQLite; `annotation_queue/explain.py`): the slowest three of each printed, all in the JSON.
`--out FILE.json` writes every figure. `--quick` (300 prompts, 2 annotators, 5 s) is the test's smoke run.

    python bench/annotation_queue_bench.py [--prompts 3000 27861] [--annotators 8] [--limit 20] [--seconds 60]
        [--annotations N] [--think 0] [--deadline 120] [--done 0.5] [--db postgresql|sqlite] [--pg-url URL]
        [--database cheems_bench_queue] [--keep] [--explain] [--out FILE.json] [--quick]
"""

from __future__ import annotations

import json
import logging
import os
import platform
import random
import sqlite3
import subprocess
import sys
import time
from argparse import Namespace
from dataclasses import asdict
from pathlib import Path
from subprocess import PIPE
from typing import Any

import grpc
from annotation_queue.annotators import Plan, Worked, random_order
from annotation_queue.checks import check
from annotation_queue.database import fresh_database
from annotation_queue.explain import Capture, slowest
from annotation_queue.figures import rpc_figures, table
from annotation_queue.fill import add_annotators, fill, tasks_a_prompt
from annotation_queue.machine import snapshot, usage
from annotation_queue.options import parse_args
from sqlalchemy import text
from sqlalchemy.engine import Engine

from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import annotation_pb2_grpc
from services.annotation.server import host
from services.hosting import HostConfig
from services.store.accounts import AccountBook
from services.store.db import StoreConfig, create_engine_for
from services.store.tasks import QueueConfig

ROOT = Path(__file__).resolve().parents[1]  # the repository: what the clients import the stubs from


def team(args: Namespace, target: str, tokens: dict[str, str]) -> tuple[list[Worked], dict[str, Any]]:
    """Every annotator's process started, released together once all are connected: what each did, and where the
    CPU went meanwhile (`machine.usage`; the clients' seconds include their start)."""
    timing = {"seed": args.seed, "think": args.think}
    plans = [
        Plan(target, token, name, args.seconds, args.limit, args.annotations, args.deadline, args.retries, **timing)
        for name, token in tokens.items()
    ]
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")])
    }
    command = [sys.executable, "-m", "annotation_queue.annotators"]
    children = [subprocess.Popen(command, stdin=PIPE, stdout=PIPE, text=True, env=env) for _ in plans]
    try:
        pipes = [(child.stdin, child.stdout) for child in children]
        for (send, _), plan in zip(pipes, plans, strict=True):
            assert send is not None
            send.write(json.dumps(asdict(plan)) + "\n")
            send.flush()
        for (_, answer), plan in zip(pipes, plans, strict=True):
            if answer is None or answer.readline().strip() != "ready":
                raise SystemExit(f"annotator {plan.name} could not connect to {target} (its error is above)")
        before = snapshot()
        for send, _ in pipes:
            assert send is not None
            send.write("go\n")
            send.flush()
        patience = args.seconds + args.deadline * (args.retries + 2) + 120
        outputs = [child.communicate(timeout=patience)[0] for child in children]
        cpu = usage(before, snapshot())
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    failed = [plan.name for plan, child in zip(plans, children, strict=True) if child.returncode]
    if failed:
        raise SystemExit(f"annotators failed: {', '.join(failed)} (their errors are above)")
    return [Worked.of_json(json.loads(output)) for output in outputs], cpu


def explained(capture: Capture, port: int, limit: int, token: str) -> list[dict[str, Any]]:
    """The plans of one more ListTasks of an annotator of the run (their annotations and holdings as the run left
    them: what their listing costs as they accumulate) and of their submit of the first task listed."""
    metadata = [("authorization", f"Bearer {token}")]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = annotation_pb2_grpc.AnnotationServiceStub(channel)
        with capture.during("ListTasks"):
            listed = stub.ListTasks(pb.ListTasksRequest(group_size=3, limit=limit), timeout=600, metadata=metadata)
        if listed.tasks:
            task = listed.tasks[0].task
            request = pb.Annotation(annotation_id="bench-explain", prompt_id=task.prompt_id, task_id=task.task_id)
            request.kind = pb.ANNOTATOR_KIND_HUMAN
            request.order.CopyFrom(random_order(random.Random(0), list(task.response_ids)))
            with capture.during("SubmitAnnotation"):
                stub.SubmitAnnotation(request, timeout=600, metadata=metadata)
    capture.close()
    return capture.plans


def database_version(engine: Engine) -> str:
    if engine.dialect.name != "postgresql":
        return f"SQLite {sqlite3.sqlite_version}"
    with engine.connect() as connection:
        return " ".join(str(connection.scalar(text("SELECT version()"))).split()[:2])


def run_size(args: Namespace, prompts: int) -> dict[str, Any]:
    """One queue size: fill, serve, work, check (and explain)."""
    with fresh_database(args.db, args.pg_url, args.database, args.keep) as url:
        engine = create_engine_for(StoreConfig(url))
        try:
            tokens = add_annotators(engine, args.annotators)
            past = max(0, tasks_a_prompt(args.responses) - args.annotators) if args.done else 0
            names = [*tokens, *add_annotators(engine, past, "bench-past")]  # `--done`: who closed the older tasks
            filled = fill(engine, prompts, args.responses, args.chars, args.seed, args.batch, args.done, names)
            print(
                f"filled {filled.prompts:,} prompts, {filled.tasks:,} tasks in {filled.seconds:.1f} s", file=sys.stderr
            )
            capture = Capture(engine) if args.explain else None
            queue = QueueConfig(max_held=args.max_held, people_per_prompt=args.people_per_prompt)
            grpc_host = host(engine, HostConfig(port=0), AccountBook(engine), queue=queue).start()
            try:
                worked, cpu = team(args, f"127.0.0.1:{grpc_host.port}", tokens)
                checks = check(engine, [w.listed for w in worked], args.people_per_prompt)
                first = next(iter(tokens.values()))
                plans = explained(capture, grpc_host.port, args.limit or 100, first) if capture else []
            finally:
                grpc_host.stop(0)
            version = database_version(engine)
        finally:
            engine.dispose()  # before the database is dropped
    span = max(w.seconds for w in worked)
    stored = sum(w.stored for w in worked)
    return {
        "db": version,
        "prompts": prompts,
        "responses": args.responses,
        "annotators": args.annotators,
        "limit": args.limit,
        "max_held": args.max_held,
        "people_per_prompt": args.people_per_prompt,
        "deadline": args.deadline,
        "think": args.think,
        "seconds": span,
        "cpus": os.cpu_count(),
        "done": args.done,
        "cpu": cpu,
        "filled": asdict(filled),
        "rpcs": rpc_figures([c for w in worked for c in w.calls], args.seconds if not args.annotations else span),
        "team": {"stored": stored, "per_second": stored / span, "empty_listings": sum(w.empty for w in worked)},
        "per_annotator": {w.name: w.stored for w in worked},
        "checks": checks,
        "explain": plans,
    }


def print_plans(plans: list[dict[str, Any]]) -> None:
    for rpc in ("ListTasks", "SubmitAnnotation"):
        mine = [p for p in plans if p["rpc"] == rpc]
        print(f"\n{rpc}: {len(mine)} statements explained ({sum(p['count'] for p in mine)} sent); the slowest:")
        for plan in slowest(plans, rpc):
            took = f"{plan['ran_ms']:.2f} ms in all" + (
                f", EXPLAIN's {plan['ms']:.2f} ms" if plan["ms"] is not None else ""
            )
            print(f"-- sent {plan['count']}x, {took}: {' '.join(plan['statement'].split())[:600]}")
            print("\n".join("   " + line for line in plan["plan"]))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # the server's
    runs = []
    for prompts in args.prompts:
        runs.append(run_size(args, prompts))
        print(table(runs[-1]))
        if args.explain:
            print_plans(runs[-1]["explain"])
        print()
    report = {
        "bench": "annotation_queue",
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "node": platform.node()},
        "args": {k: v for k, v in vars(args).items() if k != "pg_url"},
        "runs": runs,
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
