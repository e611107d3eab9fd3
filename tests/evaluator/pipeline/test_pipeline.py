"""The streaming evaluator end to end: real broker, real scorer over gRPC, real database, real processes.

Runs (`evaluator.pipeline.runs`), the score worker, the result sink (also as `cheems service eval-sink`
processes, one killed mid-run) and the in-process driver behind `cheems eval --via-kafka`.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from cheems.formats.benchfile import BenchFormat, read_bench_file
from cheems.formats.cheemsbench import BenchItem, read_bench
from cheems.formats.rewards_file import write_rewards
from cheems.v1 import evaluation_pb2
from evaluator.errors import RunFailed
from evaluator.evaluate import DEFAULT_OPTIONS, EvalOptions, evaluate_files, load_subsets
from evaluator.metrics import Semantics
from evaluator.pipeline.driver import evaluate_via_kafka, wait_for_run
from evaluator.pipeline.runs import fail_run, run_message, run_state, start_run
from evaluator.pipeline.sink import ResultSink
from evaluator.pipeline.worker import ScoreWorker
from evaluator.report import to_json
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.scorer.offline.bench_rewards import write_bench_rewards
from services.scorer.runtime import ScorerServer
from services.store import repository
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import EvalRun, EvalScore

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
BENCH = [str(SAMPLE / "open.jsonl"), str(SAMPLE / "human.jsonl")]


@pytest.fixture
def db(tmp_path: Path) -> tuple[str, Engine]:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    return url, create_engine_for(StoreConfig(url))


def expected_result(engine: Engine, run_id: str, tmp_path: Path, options: EvalOptions = DEFAULT_OPTIONS) -> dict:
    """What `cheems eval` says about the scores the pipeline stored."""
    subsets = load_subsets(BENCH)
    with session_scope(engine) as session:
        rows = {
            r.item: dict(zip(r.response_ids, r.scores, strict=True))
            for r in session.scalars(select(EvalScore).where(EvalScore.run_id == run_id))
        }
    write_rewards(
        tmp_path / "rewards.jsonl",
        [
            (item.input, rid, rows[f"{name}:{i}"][rid])
            for name, (_, items) in subsets.items()
            for i, item in enumerate(items)
            for rid in rows[f"{name}:{i}"]
        ],
    )
    return to_json(evaluate_files(BENCH, tmp_path / "rewards.jsonl", options))


def wait_for(predicate, timeout: float = 120.0, step=None, what=lambda: "") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what()}"
        if step:
            step()
        else:
            time.sleep(0.2)


def test_a_killed_evaluator_restarts_and_finishes_without_duplicates(
    broker: EmbeddedBroker, scorer: ScorerServer, db: tuple[str, Engine], tmp_path: Path
) -> None:
    url, engine = db
    publisher = Publisher(broker.bootstrap)
    run_id = start_run(engine, publisher, BENCH, f"127.0.0.1:{scorer.grpc_port}")
    worker = ScoreWorker(broker.bootstrap, f"127.0.0.1:{scorer.grpc_port}")
    wait_for(
        lambda: worker.consumer.poll_once(200) == 0 and worker.consumer.stats.handled >= 36,
        timeout=120,
        what=lambda: f"the worker ({worker.consumer.stats})",
    )
    worker.close()

    def sink(delay: float) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "cheems_cli", "service", "eval-sink", "--bootstrap", broker.bootstrap]
        cmd += [
            "--db",
            url,
            "--delay",
            str(delay),
            "--batch-size",
            "4",
            "--health-port",
            "-1",
        ]  # killed between batches
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))

    first = sink(0.3)
    wait_for(
        lambda: run_state(engine, run_id)[1] >= 3,
        timeout=120,
        what=lambda: f"the first sink {run_state(engine, run_id)[:3]}",
    )
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    state, done, total, _ = run_state(engine, run_id)
    assert state == "running" and 3 <= done < total  # killed mid-run

    second = sink(0.0)
    try:
        wait_for(
            lambda: run_state(engine, run_id)[0] == "succeeded",
            timeout=180,
            what=lambda: f"the second sink {run_state(engine, run_id)[:3]}",
        )
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    state, done, total, result = run_state(engine, run_id)
    assert done == total == 36  # redelivered scores were no-ops, nothing counted twice
    assert result == expected_result(engine, run_id, tmp_path)
    publisher.close()


def test_metrics_through_kafka_equal_cheems_eval(
    broker: EmbeddedBroker, scorer: ScorerServer, db: tuple[str, Engine], tmp_path: Path
) -> None:
    _, engine = db
    publisher = Publisher(broker.bootstrap)
    options = EvalOptions(Semantics.OFFICIAL, ece_bins=3)  # not the defaults: the sink must use the run's own
    run_id = start_run(engine, publisher, BENCH, f"127.0.0.1:{scorer.grpc_port}", options)
    # groups of their own: on Tansu a group whose members just left can be slow to hand out partitions again
    worker = ScoreWorker(broker.bootstrap, f"127.0.0.1:{scorer.grpc_port}", group=f"workers-{run_id}")
    sink = ResultSink(broker.bootstrap, engine, group=f"sink-{run_id}")

    def step() -> None:
        worker.consumer.poll_once(200)
        sink.consumer.poll_once(200)

    wait_for(lambda: run_state(engine, run_id)[0] == "succeeded", step=step)
    _, done, total, result = run_state(engine, run_id)
    assert done == total == 36
    assert result == expected_result(engine, run_id, tmp_path, options)
    assert result != expected_result(engine, run_id, tmp_path, EvalOptions(Semantics.OFFICIAL))  # 3 bins, not 5
    worker.close()
    sink.close()
    publisher.close()


def test_cli_eval_via_kafka_equals_eval_on_a_rewards_file(scorer: ScorerServer, tmp_path: Path) -> None:
    """`cheems eval --via-kafka` / `cheems rewards` / `cheems eval --rewards`, called in-process (the same typer
    app `python -m cheems_cli` runs; the eval-sink tests above cover the command as a process of its own)."""
    from typer.testing import CliRunner

    from cheems_cli.main import app

    url = f"127.0.0.1:{scorer.grpc_port}"

    def cheems(*args: object) -> None:
        run = CliRunner().invoke(app, [*map(str, args)])
        assert run.exit_code == 0, (run.output[-2000:], run.exception)

    cheems(
        "eval",
        *BENCH,
        "--via-kafka",
        "--scorer-url",
        url,
        "--db",
        f"sqlite:///{tmp_path / 'r.db'}",
        "--json",
        tmp_path / "kafka.json",
        "--ece-bins",
        3,
    )
    cheems("rewards", *BENCH, "--model-url", url, "--out", tmp_path / "rewards.jsonl")
    cheems("eval", *BENCH, "--rewards", tmp_path / "rewards.jsonl", "--json", tmp_path / "file.json", "--ece-bins", 3)
    cheems("eval", *BENCH, "--rewards", tmp_path / "rewards.jsonl", "--json", tmp_path / "five.json")
    via_kafka = json.loads((tmp_path / "kafka.json").read_text())
    via_file = json.loads((tmp_path / "file.json").read_text())
    assert same_metrics(via_kafka, via_file)
    assert via_kafka != json.loads((tmp_path / "five.json").read_text())  # --ece-bins reached the sink


def same_metrics(a: object, b: object) -> bool:
    """Equal, floats to 1e-6 relative: the worker scores prompts in ScoreBatch calls, whose padding differs from
    `cheems rewards`' one Score call per prompt, so the rewards agree to float precision, not bit for bit."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_metrics(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_metrics(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def test_the_driver_returns_what_the_sink_stored_and_reads_the_bench_once(
    scorer: ScorerServer, db: tuple[str, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, engine = db
    reads: list[str] = []

    def counted(path: str | Path, fmt: BenchFormat = BenchFormat.AUTO) -> list[BenchItem]:
        reads.append(Path(path).name)
        return read_bench_file(path, fmt)

    monkeypatch.setattr("evaluator.evaluate.read_bench_file", counted)
    with EmbeddedBroker() as own:  # a broker of its own: the module's has other tests' requests on it
        own.create_topics(topics.with_dead_letters())
        options = EvalOptions(ece_bins=4)
        result = evaluate_via_kafka(
            BENCH, f"127.0.0.1:{scorer.grpc_port}", own.bootstrap, engine, options, progress=False
        )
    assert sorted(reads) == ["human.jsonl", "open.jsonl"]  # start_run and the sink share one read
    with session_scope(engine) as session:
        (run,) = session.scalars(select(EvalRun)).all()
    assert run.state == "succeeded" and run.ece_bins == 4
    assert to_json(result) == run.result


def test_rewardbench_rows_through_kafka_equal_eval_on_their_rewards_file(
    scorer: ScorerServer, db: tuple[str, Engine], tmp_path: Path
) -> None:
    rows = tmp_path / "rb.jsonl"
    items = [
        {"prompt": "你好吗？", "chosen": "我很好，谢谢。", "rejected": "不好", "subset": "chat-easy", "id": 1},
        {"prompt": "你好吗？", "chosen": "很好", "rejected": "嗯", "subset": "chat-easy", "id": 2},  # a prompt again
        {"prompt": "1+1=?", "chosen": "2", "rejected": "3", "subset": "math-prm", "id": 3},
    ]
    rows.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items), encoding="utf-8")
    _, engine = db
    url = f"127.0.0.1:{scorer.grpc_port}"
    with EmbeddedBroker() as own:
        own.create_topics(topics.with_dead_letters())
        result = evaluate_via_kafka([str(rows)], url, own.bootstrap, engine, progress=False)
    write_bench_rewards([rows], tmp_path / "rewards.jsonl", url=url)  # `cheems rewards` on the same rows
    assert set(result.subsets["rb"].per_category) == {"chat-easy", "math-prm"} and result.subsets["rb"].pairs == 3
    assert same_metrics(to_json(result), to_json(evaluate_files([rows], tmp_path / "rewards.jsonl")))


def test_a_run_that_cannot_be_finished_fails_with_its_reason_and_the_sink_goes_on(
    broker: EmbeddedBroker, scorer: ScorerServer, db: tuple[str, Engine], tmp_path: Path
) -> None:
    """A bench file broken on disk between StartRun and completion: a real sink process marks that run
    failed, naming the file and line, keeps running and completes the next run (it used to die on it,
    again on every restart, leaving every other run "running" for good)."""
    url, engine = db
    scorer_url = f"127.0.0.1:{scorer.grpc_port}"
    doomed_file = tmp_path / "doomed" / "open.jsonl"
    doomed_file.parent.mkdir()
    shutil.copy(SAMPLE / "open.jsonl", doomed_file)
    publisher = Publisher(broker.bootstrap)
    doomed = start_run(engine, publisher, [str(doomed_file)], scorer_url)
    good = start_run(engine, publisher, [str(SAMPLE / "human.jsonl")], scorer_url)
    publisher.close()
    first, *rest = doomed_file.read_bytes().splitlines(keepends=True)
    broken = json.dumps({**json.loads(first), "category": ["推理"]}, ensure_ascii=False).replace("推理", "\\ud800")
    doomed_file.write_bytes(broken.encode() + b"\n" + b"".join(rest))  # a lone surrogate: it passed StartRun before

    cmd = [sys.executable, "-m", "cheems_cli", "service", "eval-sink", "--bootstrap", broker.bootstrap, "--db", url]
    sink = subprocess.Popen(
        [*cmd, "--health-port", "-1", "--group", f"sink-{doomed}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    worker = ScoreWorker(broker.bootstrap, scorer_url, group=f"workers-{doomed}")
    try:
        wait_for(
            lambda: run_state(engine, good).state == "succeeded" and run_state(engine, doomed).state == "failed",
            timeout=180,
            step=lambda: worker.consumer.poll_once(200),
            what=lambda: f"the runs {run_state(engine, doomed)[:3]} {run_state(engine, good)[:3]}",
        )
        assert sink.poll() is None  # the sink is still consuming
    finally:
        worker.close()
        sink.send_signal(signal.SIGTERM)
        _, stderr = sink.communicate(timeout=30)
    failed = run_message(engine, doomed)
    assert failed.error.startswith("the run could not be finished: ")
    assert f"{doomed_file}:1: category[0]: a lone surrogate" in failed.error and not failed.HasField("result")
    assert run_state(engine, doomed).result is None and run_state(engine, good).result is not None
    assert f"run {doomed} could not be finished" in stderr.decode(errors="replace")


@pytest.fixture
def sink_only(broker: EmbeddedBroker, engine: Engine) -> Iterator[ResultSink]:
    sink = ResultSink(broker.bootstrap, engine, group=f"sink-{uuid.uuid4().hex[:8]}")
    yield sink
    sink.close()


def scored_run(engine: Engine, items: list[BenchItem], path: str) -> str:
    """A run of `items` (the bench file `path`) whose every item has its scores stored."""
    with session_scope(engine) as session:
        run_id = repository.create_run(session, [path], "h:1", "paper", 5, len(items))
        for index, item in enumerate(items):
            scores = {r.id: float(-i) for i, r in enumerate(item.responses)}
            repository.record_scores(session, run_id, f"{Path(path).stem}:{index}", scores)
    return run_id


def test_metrics_the_database_refuses_fail_the_run_and_the_next_run_completes(
    engine: Engine, sink_only: ResultSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original poison, on SQLite and PostgreSQL: a category with a lone surrogate (what the reader let
    through before) reached the stored metrics, and storing them raised UnicodeEncodeError at every restart."""
    items = read_bench(SAMPLE / "open.jsonl")
    poisoned = [replace(item, category=("\ud800",)) if i == 0 else item for i, item in enumerate(items)]
    doomed, good = scored_run(engine, poisoned, "poisoned.jsonl"), scored_run(engine, items, "open.jsonl")
    subsets = {"poisoned.jsonl": ("poisoned", poisoned), "open.jsonl": ("open", items)}
    monkeypatch.setattr(  # the reader now refuses such a file: hand the sink what it read before
        "evaluator.pipeline.sink.load_subsets", lambda paths, cache: {subsets[p][0]: (p, subsets[p][1]) for p in paths}
    )
    assert sink_only.finish_if_complete(doomed) is None
    failed = run_message(engine, doomed)
    assert failed.state == evaluation_pb2.RUN_STATE_FAILED and "UnicodeEncodeError" in failed.error
    assert sink_only.finish_if_complete(doomed) is None  # a redelivered score: the run stays failed, nothing raises
    assert sink_only.finish_if_complete(good) is not None
    assert run_state(engine, good).state == "succeeded"


def test_the_driver_stops_at_a_failed_run_with_its_reason(engine: Engine) -> None:
    with session_scope(engine) as session:
        run_id = repository.create_run(session, ["open.jsonl"], "h:1", "paper", 5, 18)
    assert fail_run(engine, run_id, "open.jsonl:3: rank: response id 'r2' has no rank")
    with pytest.raises(RunFailed, match=r"open\.jsonl:3: rank: response id 'r2' has no rank"):
        wait_for_run(engine, run_id, [], timeout=60, progress=False)  # not an hour of waiting
