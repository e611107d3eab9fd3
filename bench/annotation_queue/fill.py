"""The queue filled fast: prompts, responses and triple tasks written in bulk, the rows the service would write.

Ingesting the paper's 27,861 prompts through the ingestion service took 174 s, and their tasks 88 s more (issue
43): too slow for a benchmark. Here `bench/paper_data.py`'s seeded Chinese samples go straight into the tables,
`--batch` prompts a transaction (memory stays that of one batch), each row built as the annotation service builds
it: the prompt's id from its content (`validate.prompt_id_for`), every response judged by the rule filter
(`algorithm.filters`, the service's default `TaskConfig`), the kept keys' triples (`algorithm.protocol`, 11 of 7
responses) with their ids (`validate.task_id_for`) and doubles (none by default). The columns not named take their
defaults from the ORM models (`created_at`, `status`), as a row the service inserts does; a test checks that the
service, asked for the same prompts' tasks afterwards, adds nothing. On PostgreSQL the tables are then ANALYZEd, as
autovacuum would have done during a real ingestion of minutes: without statistics, just after a bulk fill, the
planner takes the open tasks for a handful and picks plans no running service would meet.

`done` (`--done`): the oldest share of the prompts comes with every task closed by a human annotation, as if the
team had worked a while (the queue's cost as annotations accumulate; a minute's run adds a few thousand): each task
by another annotator (the run's own accounts first, then "past" ones, so a prompt's triples go to different
people), with no ranking stored (the queue reads none) and no claim (the task is done; the claims are the queue's
own business and its format may change).

    tokens = add_annotators(engine, 8)                   # {name: token}
    report = fill(engine, prompts=3000, responses=7)     # Filled(prompts, responses, tasks, annotations, seconds, ...)
    report = fill(engine, 3000, done=0.5, names=[*tokens, *past])   # half the prompts annotated already
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import paper_data
from sqlalchemy import insert, text
from sqlalchemy.engine import Engine

from services.annotation.algorithm.doubles import doubled
from services.annotation.algorithm.filters import reason
from services.annotation.algorithm.protocol import triple_tasks
from services.annotation.config import TaskConfig
from services.store import validate as v
from services.store.accounts import add_annotator
from services.store.db import session_scope
from services.store.models import Annotation, AnnotationTask, Prompt, Response

Rows = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class Filled:
    prompts: int
    responses: int
    tasks: int
    annotations: int  # written with the tasks they close (`--done`)
    seconds: float
    analyze_seconds: float  # PostgreSQL's ANALYZE afterwards (0 on SQLite)


def rows_of(records: Iterable[dict[str, Any]], config: TaskConfig | None = None) -> Rows:
    """The prompts', responses' and triple tasks' rows of paper_data records, as the annotation service writes them
    (`AnnotationService.take_sample`: `repository.add_sample`, then `_create_tasks`)."""
    config = config or TaskConfig()
    rows: Rows = {"prompts": [], "responses": [], "tasks": []}
    for record in records:
        category = list(record["category"])
        pid = v.prompt_id_for(record["input"])
        rows["prompts"].append({"id": pid, "text": record["input"], "system_prompt": None, "category": category})
        rows["prompts"][-1] |= {"source": "", "history": None}
        kept = []
        for response in record["responses"]:
            why = None if config.rule_filter is None else reason(response["content"], category, config.rule_filter)
            rows["responses"].append(
                {"prompt_id": pid, "response_key": response["id"], "content": response["content"]}
                | {"model": None, "filter_reason": why}
            )
            kept += [response["id"]] if why is None else []
        rows["tasks"] += task_rows(pid, sorted(kept), config)
    return rows


def task_rows(pid: str, keys: list[str], config: TaskConfig) -> list[dict[str, Any]]:
    groups = [v.task_group("triple", g) for g in triple_tasks(keys) if len(g) == 3]
    twice = [g for g in groups if doubled(v.task_id_for(pid, g), config.doubling)]
    return [
        {"id": v.task_id_for(pid, g, copy), "prompt_id": pid, "response_keys": g, "kind": "triple", "copy": copy}
        | {"status": "open"}  # every row names the same columns (one executemany); `annotated` closes some
        for copy, each in ((0, groups), (1, twice))
        for g in each
    ]


def batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def annotated(rows: Rows, first: int, done: int, names: Sequence[str]) -> list[dict[str, Any]]:
    """Close every task of the batch's prompts numbered below `done` (the batch's first is number `first`) with a
    human annotation, and return those annotations: a prompt's tasks each by another of `names` (rotated by the
    prompt's number, so each name gets its share), ordered as the task lists its responses."""
    number = {p["id"]: first + i for i, p in enumerate(rows["prompts"]) if first + i < done}
    seen: dict[str, int] = {}
    out = []
    for task in rows["tasks"]:
        if (n := number.get(task["prompt_id"])) is None:
            continue
        j = seen[task["prompt_id"]] = seen.get(task["prompt_id"], -1) + 1
        if j >= len(names):
            raise ValueError(f"a prompt has more tasks than the {len(names)} annotators given to close them")
        task["status"] = "done"
        result = {"order": [[key] for key in task["response_keys"]]}
        out.append(
            {"id": f"done:{task['id']}", "prompt_id": task["prompt_id"], "task_id": task["id"], "kind": "human"}
            | {"annotator": names[(n + j) % len(names)], "result": result, "discarded": []}
        )
    return out


def write(engine: Engine, rows: Rows) -> None:
    """One transaction: the rows, parents first."""
    tables = (("prompts", Prompt), ("responses", Response), ("tasks", AnnotationTask), ("annotations", Annotation))
    with engine.begin() as connection:
        for name, model in tables:
            if rows.get(name):
                connection.execute(insert(model), rows[name])  # Core: the models' column defaults


def fill(
    engine: Engine,
    prompts: int,
    responses: int = 7,
    chars: tuple[int, int] = (350, 900),
    seed: int = 0,
    batch: int = 500,
    done: float = 0.0,
    names: Sequence[str] = (),
) -> Filled:
    """Write `prompts` samples of `responses` each and their tasks, `batch` prompts a transaction; the oldest `done`
    share of the prompts with every task annotated by `names` (`annotated`)."""
    started, counts = time.perf_counter(), dict.fromkeys(("prompts", "responses", "tasks", "annotations"), 0)
    for number, chunk in enumerate(batches(paper_data.records(prompts, responses, seed, *chars), batch)):
        rows = rows_of(chunk)
        rows["annotations"] = annotated(rows, number * batch, round(done * prompts), names) if done else []
        write(engine, rows)
        counts = {name: n + len(rows[name]) for name, n in counts.items()}
    seconds, started = time.perf_counter() - started, time.perf_counter()
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(text("ANALYZE"))
    return Filled(**counts, seconds=seconds, analyze_seconds=time.perf_counter() - started)


def tasks_a_prompt(responses: int, config: TaskConfig | None = None) -> int:
    """The most tasks a prompt of `responses` gets (its triples, and every one doubled where doubling is on)."""
    triples = len([g for g in triple_tasks([f"r{i}" for i in range(responses)]) if len(g) == 3])
    return triples * (2 if (config or TaskConfig()).doubling.share > 0 else 1)


def add_annotators(engine: Engine, count: int, prefix: str = "bench-annotator") -> dict[str, str]:
    """`count` annotator accounts, {name: token}: each signs its own calls, as a person does."""
    with session_scope(engine) as session:
        return {f"{prefix}-{i}": add_annotator(session, f"{prefix}-{i}") for i in range(1, count + 1)}
