"""The benchmark's options: `parse_args(argv)`; `--quick` changes the defaults to a seconds-long smoke run."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from services.store.tasks import QueueConfig

PAPER_PROMPTS = 27_861  # CheemsPreference's prompts (the paper's size, issue 43's measurement)
PG_URL = os.environ.get("CHEEMS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
QUICK = {"prompts": [300], "annotators": 2, "seconds": 5.0}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="The annotation queue under a team of annotators (issue 43).")
    p.add_argument("--prompts", type=int, nargs="+", default=[3000, PAPER_PROMPTS], help="queue sizes, one run each")
    p.add_argument("--responses", type=int, default=7, help="responses a prompt (7: 11 triples a prompt)")
    p.add_argument("--chars", default="350,900", help="LOW,HIGH: a response's length in characters (paper_data)")
    p.add_argument("--annotators", type=int, default=8, help="annotator accounts, each a client process")
    p.add_argument("--limit", type=int, default=20, help="ListTasks' limit (0: the service's default)")
    p.add_argument("--max-held", type=int, default=QueueConfig.max_held, help="tasks a person holds at once")
    p.add_argument(
        "--people-per-prompt", type=int, default=0, help="the service's QueueConfig.people_per_prompt (0: the paper's)"
    )
    p.add_argument("--seconds", type=float, default=60.0, help="how long the annotators work")
    p.add_argument("--annotations", type=int, default=0, help="or stop an annotator once it stored this many")
    p.add_argument("--think", type=float, default=0.0, help="seconds an annotator reads a task before submitting")
    p.add_argument("--deadline", type=float, default=120.0, help="seconds each call may take")
    p.add_argument("--retries", type=int, default=3, help="a submit retried (same id) on UNAVAILABLE or a deadline")
    p.add_argument("--done", type=float, default=0.0, help="share of the prompts annotated already (oldest first)")
    p.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    p.add_argument("--pg-url", default=PG_URL, help="a PostgreSQL server's URL; the bench makes its own database")
    p.add_argument("--database", default="cheems_bench_queue", help="the database made (and dropped) on it")
    p.add_argument("--keep", action="store_true", help="leave the database (or SQLite file) for a look afterwards")
    p.add_argument("--batch", type=int, default=500, help="prompts written a transaction while filling")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--explain", action="store_true", help="EXPLAIN the statements of one ListTasks and one submit")
    p.add_argument("--out", default="", help="write the figures as JSON here")
    p.add_argument("--quick", action="store_true", help="300 prompts, 2 annotators, 5 s (a smoke run)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = parser()
    if "--quick" in (argv if argv is not None else sys.argv[1:]):
        p.set_defaults(**QUICK)  # what the command line gives still wins
    args = p.parse_args(argv)
    low, _, high = args.chars.partition(",")
    if not (low.isdigit() and high.isdigit() and 0 < int(low) <= int(high)):
        p.error(f"--chars: expected LOW,HIGH with 0 < LOW <= HIGH, got {args.chars!r}")
    args.chars = (int(low), int(high))
    for name in ("annotators", "batch", "responses"):
        if getattr(args, name) < 1:
            p.error(f"--{name}: expected at least 1, got {getattr(args, name)}")
    if not 0 <= args.done < 1:
        p.error(f"--done: a share in [0, 1), got {args.done}")
    if min(args.prompts) < 1 or args.seconds <= 0 or args.deadline <= 0 or args.think < 0:
        p.error("--prompts, --seconds and --deadline must be positive, --think not negative")
    if not args.database.replace("_", "").isalnum():
        p.error(f"--database: letters, digits and _ only, got {args.database!r}")
    return args
