"""bench/annotation_queue_bench.py: the bulk fill writes the rows the annotation service writes, the client loop
retries a submit with its own annotation id, the figures, and the quick run end to end on SQLite and PostgreSQL
(its JSON holds the figures and the checks passed). No timings asserted."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import paper_data
import pytest
from annotation_queue.annotators import Plan, annotate, random_order
from annotation_queue.checks import check
from annotation_queue.figures import percentile, rpc_figures
from annotation_queue.fill import add_annotators, fill, rows_of, tasks_a_prompt, write
from annotation_queue.options import parse_args
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.pool import NullPool

from cheems.v1 import annotation_pb2 as pb
from services.annotation.algorithm.doubles import DoublingConfig
from services.annotation.config import TaskConfig
from services.annotation.service import AnnotationService
from services.store.db import read_scope, session_scope
from services.store.models import Annotation, AnnotationTask, Prompt, Response
from tests.conftest import PG_URL

BENCH = Path(__file__).resolve().parents[2] / "bench" / "annotation_queue_bench.py"


def records() -> list[dict[str, Any]]:
    """Three paper_data samples of 7 responses, and one of 5 whose second answer the rule filter keeps out."""
    made = list(paper_data.records(3, 7, 0, 20, 60))
    english = "This answer is written entirely in English, so its Chinese ratio is far below the threshold."
    responses = [{"id": f"r{i}", "content": english if i == 2 else f"第{i}个回答，说得很清楚。"} for i in range(1, 6)]
    return [*made, {"input": "哪个回答更好？", "responses": responses, "category": ["知识"]}]


def stored(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    with read_scope(engine) as s:
        prompts = s.execute(select(Prompt.id, Prompt.text, Prompt.system_prompt, Prompt.category, Prompt.source))
        responses = select(Response.prompt_id, Response.response_key, Response.content, Response.filter_reason)
        tasks = select(AnnotationTask.id, AnnotationTask.prompt_id, AnnotationTask.response_keys, AnnotationTask.kind)
        tasks = tasks.add_columns(AnnotationTask.status, AnnotationTask.copy)
        return {
            "prompts": sorted(map(tuple, prompts)),
            "responses": [tuple(r) for r in s.execute(responses.order_by(Response.id))],
            "tasks": sorted(tuple(r) for r in s.execute(tasks)),
        }


@pytest.mark.parametrize("config", [TaskConfig(), TaskConfig(doubling=DoublingConfig(0.5))], ids=["plain", "doubled"])
def test_the_fill_writes_what_the_service_writes(engine: Engine, config: TaskConfig) -> None:
    samples = records()
    write(engine, rows_of(samples, config))
    filled = stored(engine)
    assert len(filled["prompts"]) == 4 and any(r[3] for r in filled["responses"])  # the English answer kept out
    service = AnnotationService(engine, tasks=config)
    for sample in samples:
        responses = [(r["id"], r["content"]) for r in sample["responses"]]
        pid, tasks = service.take_sample("", sample["input"], responses, sample["category"], None, "", [], 3)
        assert sorted(t for t, _ in tasks) == sorted(t[0] for t in filled["tasks"] if t[1] == pid)
    assert stored(engine) == filled  # the service, asked for the same prompts' tasks, adds and changes nothing
    per_prompt = sorted(Counter(t[1] for t in filled["tasks"]).values())
    assert per_prompt == [4, 11, 11, 11] if not config.doubling.share else sum(per_prompt) > 37  # 5 answers, 1 out


def test_prompts_annotated_before_the_run_keep_the_rules(engine: Engine) -> None:
    names = list(add_annotators(engine, tasks_a_prompt(7), "past"))  # 11: one a triple of a prompt
    filled = fill(engine, 6, chars=(20, 60), batch=2, done=0.5, names=names)  # the third done prompt: 2nd batch
    assert (filled.prompts, filled.tasks, filled.annotations) == (6, 66, 33)
    checks = check(engine, [])
    assert checks["passed"] and checks["annotations"] == checks["tasks_done"] == 33
    with read_scope(engine) as s:
        mine = set(s.scalars(select(Annotation.prompt_id).where(Annotation.annotator == names[0])))
    offered = {t.prompt_id for t in AnnotationService(engine).open_tasks(limit=100, annotator=names[0])}
    assert len(mine) == len(offered) == 3 and not mine & offered  # the open prompts' tasks only


def test_the_check_holds_each_person_to_their_share_of_a_prompt(engine: Engine) -> None:
    """Two annotations of one 11-triple prompt by one person break the paper's rule, not 8 people's (2 each)."""
    names = list(add_annotators(engine, 1, "one"))
    fill(engine, 1, chars=(20, 60), batch=1, done=0.0, names=names)
    with session_scope(engine) as s:
        for n, task in enumerate(s.scalars(select(AnnotationTask).order_by(AnnotationTask.id)).all()[:2]):
            a, b, c = task.response_keys
            s.add(Annotation(id=f"a{n}", prompt_id=task.prompt_id, task_id=task.id, annotator=names[0], kind="human",
                             result={"order": [[a], [b], [c]]}, discarded=[]))  # fmt: skip
            task.status = "done"
    assert check(engine, [], people_per_prompt=0)["prompts_over_ones_share"] == 1
    assert check(engine, [], people_per_prompt=8)["prompts_over_ones_share"] == 0
    assert not check(engine, [])["passed"] and check(engine, [], people_per_prompt=8)["passed"]


class FlakyStub:
    """Answers ListTasks with one task, and a submit UNAVAILABLE once, then as a replay of the stored one."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def ListTasks(self, request: Any, **_: Any) -> Any:
        task = pb.AnnotationTask(task_id="t1", prompt_id="p1", response_ids=["r1", "r2", "r3"])
        return pb.ListTasksResponse(tasks=[pb.OpenTask(task=task)])

    def SubmitAnnotation(self, request: Any, **_: Any) -> Any:
        self.submitted.append(request.annotation_id)
        if len(self.submitted) == 1:
            raise Unavailable()
        return pb.SubmitAnnotationResponse(created=False)


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


def test_a_submit_that_failed_unavailable_is_sent_again_with_its_own_id() -> None:
    stub = FlakyStub()
    worked = annotate(stub, Plan("", "token", "a1", seconds=60, annotations=1))
    assert len(stub.submitted) == 2 and stub.submitted[0] == stub.submitted[1]
    assert worked.stored == 1 and worked.listed == {"t1"}
    assert [(rpc, code) for rpc, _, _, code in worked.calls] == [
        ("ListTasks", "OK"),
        ("SubmitAnnotation", "UNAVAILABLE"),
        ("SubmitAnnotation", "OK"),
    ]


def test_a_random_order_ranks_each_response_once() -> None:
    import random

    rng = random.Random(0)
    for _ in range(50):
        order = random_order(rng, ["r1", "r2", "r3"])
        assert sorted(i for g in order.groups for i in g.ids) == ["r1", "r2", "r3"]


def test_figures_per_rpc_and_per_third() -> None:
    assert percentile([], 99) == 0.0 and percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 99) == 4
    calls = [("ListTasks", 1.0, 0.5, "OK"), ("ListTasks", 8.0, 2.0, "DEADLINE_EXCEEDED"), ("ListTasks", 9.5, 0.1, "OK")]
    calls.append(("SubmitAnnotation", 4.0, 0.01, "OK"))
    figures = rpc_figures(calls, seconds=9.0)
    listing = figures["ListTasks"]
    assert (listing["count"], listing["max_ms"], listing["errors"]) == (3, 2000.0, {"DEADLINE_EXCEEDED": 1})
    assert [t["count"] for t in listing["thirds"]] == [1, 0, 2]  # a call begun after the end counts in the last
    assert figures["SubmitAnnotation"]["p99_ms"] == 10.0


def test_quick_changes_the_defaults_and_what_is_given_still_wins() -> None:
    args = parse_args([])
    assert (args.prompts, args.annotators, args.limit, args.seconds) == ([3000, 27861], 8, 20, 60.0)
    assert (args.db, args.think, args.done, args.deadline, args.explain) == ("postgresql", 0.0, 0.0, 120.0, False)
    quick = parse_args(["--quick", "--annotators", "3"])
    assert (quick.prompts, quick.annotators, quick.seconds, quick.chars) == ([300], 3, 5.0, (350, 900))
    with pytest.raises(SystemExit):
        parse_args(["--chars", "900,350"])


@pytest.mark.slow
@pytest.mark.parametrize("db", ["sqlite", "postgresql"])
def test_the_quick_run_prints_and_writes_its_figures(db: str, tmp_path: Path) -> None:
    database = f"cheems_bench_queue_{uuid.uuid4().hex[:12]}"
    out = tmp_path / "queue.json"
    argv = [sys.executable, str(BENCH), "--quick", "--seconds", "3", "--db", db, "--database", database]
    argv += ["--pg-url", PG_URL, "--explain", "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ListTasks" in done.stdout and "checks passed" in done.stdout
    [run] = json.loads(out.read_text())["runs"]
    assert (run["prompts"], run["annotators"], run["filled"]["tasks"]) == (300, 2, 3300)
    for rpc in ("ListTasks", "SubmitAnnotation"):
        figures = run["rpcs"][rpc]
        assert figures["count"] > 0 and figures["p50_ms"] <= figures["p99_ms"] <= figures["max_ms"]
        assert len(figures["thirds"]) == 3 and not figures["errors"]
        assert any(p["rpc"] == rpc and p["plan"] for p in run["explain"])
    assert run["team"]["stored"] == run["checks"]["annotations"] == run["checks"]["tasks_done"] > 0
    assert run["checks"]["passed"]
    admin = create_engine(PG_URL, poolclass=NullPool)
    with admin.connect() as connection:  # its database is gone
        assert connection.scalar(text("SELECT count(*) FROM pg_database WHERE datname = :d"), {"d": database}) == 0
    admin.dispose()
