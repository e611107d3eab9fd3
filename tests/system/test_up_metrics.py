"""Every process of a real `cheems up` serves Prometheus metrics: `cheems status --json` names each URL, each
exposition passes `promtool check metrics`, a real call moves exactly its own counters on the service that served
it (a refused one included), a record that does not decode is a dead letter, the intake's lag and the store's
gauges are there, and a process the supervisor restarts is counted on `cheems up`'s own /metrics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import func, select

from cheems.formats.cheemsbench import read_bench
from cheems.v1 import (
    common_pb2,
    evaluation_pb2,
    evaluation_pb2_grpc,
    ingestion_pb2,
    ingestion_pb2_grpc,
    training_pb2,
    training_pb2_grpc,
)
from services import hosting
from services.bus import topics
from services.bus.client import Publisher
from services.channels import open_channel
from services.scorer.client import RewardClient
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.models import Annotation
from system.plan import BROKER_PORT, OPERATOR_ACCOUNT, WORKER_ACCOUNT
from tests.services.observe.scrape import promtool_problems, sample_value, scrape, series
from tests.system.conftest import AI_SOURCE, HUMAN_SOURCE, JUDGED, RunningUp

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = {"ingestion", "annotation", "judge", "training", "scorer", "eval-worker", "eval-sink", "evaluation", "up"}
SAMPLE = common_pb2.Sample(
    prompt="春天的诗怎么写？",
    responses=[common_pb2.Response(id=f"r{i}", content=c) for i, c in enumerate(["春风。", "花开。", "不知道。"])],
    category=["创作"],
    source=HUMAN_SOURCE,
)


def metrics_urls(system: RunningUp) -> dict[str, str]:
    """The `metrics` of `cheems status --json`, run as a person runs it."""
    command = [sys.executable, "-m", "cheems_cli", "status", "--json", "--ports-from", str(system.config.ports_from)]
    command += ["--db", system.config.database]
    env = {**os.environ, "CHEEMS_TOKEN_FILE": str(system.config.token_file(OPERATOR_ACCOUNT))}
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout)["metrics"])


@pytest.fixture(scope="module")
def urls(running_up: RunningUp) -> dict[str, str]:
    """`cheems status --json`'s metrics URLs, asked once for the module's tests (the ports do not move)."""
    return metrics_urls(running_up)


def handled(families: dict[str, Any], service: str, method: str, code: str) -> float:
    labels = {"grpc_service": service, "grpc_method": method, "grpc_code": code}
    return sample_value(families, "grpc_server_handled_total", labels)


def eventually(read: Callable[[], Any], ok: Callable[[Any], bool], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def test_every_process_names_its_metrics_and_passes_promtool(urls: dict[str, str]) -> None:
    assert set(urls) == PROCESSES
    for name, url in urls.items():
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
        assert promtool_problems(text) == "", name
        families = scrape(url)
        assert sample_value(families, "process_resident_memory_bytes", {}) > 0, name
        assert "process_cpu_seconds" in families, name
        if name != "up":  # every gRPC server counted the supervisor's health checks
            assert handled(families, "grpc.health.v1.Health", "Check", "OK") >= 1, name
    up = scrape(urls["up"])
    assert {s["process"] for s in series(up, "cheems_up_restarts_total")} == PROCESSES - {"up"} | {"broker"}


def test_every_metric_the_alert_rules_and_the_dashboard_name_is_scraped(urls: dict[str, str]) -> None:
    """k8s/components/monitoring's rules and panels name only metrics a live system exports (or exempt ones)."""
    from tests.k8s.monitoring import assert_every_name_scraped

    assert_every_name_scraped(urls)


def test_calls_move_exactly_their_counters_on_the_service_that_served_them(
    running_up: RunningUp, urls: dict[str, str]
) -> None:
    port = running_up.config.port
    operator = running_up.token(OPERATOR_ACCOUNT)
    before = {name: scrape(url) for name, url in urls.items()}
    ingestion = f"127.0.0.1:{port(hosting.INGESTION_PORT)}"
    with open_channel(ingestion, token=operator) as channel:
        summary = ingestion_pb2_grpc.IngestionServiceStub(channel).Ingest(
            iter([ingestion_pb2.IngestRecord(sample=SAMPLE, line=1)]), timeout=60
        )
    assert summary.stored == 1
    with open_channel(ingestion, token="not-a-token-of-anyone-0123") as channel, pytest.raises(grpc.RpcError) as info:
        ingestion_pb2_grpc.IngestionServiceStub(channel).Ingest(iter([]), timeout=30)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with open_channel(f"127.0.0.1:{port(hosting.TRAINING_PORT)}", token=operator) as channel:
        training_pb2_grpc.TrainingServiceStub(channel).ListModels(training_pb2.ListModelsRequest(), timeout=30)
    evaluation = f"127.0.0.1:{port(hosting.EVALUATION_PORT)}"
    with open_channel(evaluation, token=operator) as channel, pytest.raises(grpc.RpcError) as info:
        evaluation_pb2_grpc.EvaluationServiceStub(channel).GetRun(evaluation_pb2.GetRunRequest(), timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with RewardClient(f"127.0.0.1:{port(hosting.SCORER_GRPC_PORT)}", token=running_up.token(WORKER_ACCOUNT)) as c:
        assert len(c.score("你好", ["你好！", "滚"])) == 2
    after = {name: scrape(url) for name, url in urls.items()}

    def delta(name: str, service: str, method: str, code: str) -> float:
        return handled(after[name], service, method, code) - handled(before[name], service, method, code)

    ingest = ("cheems.v1.IngestionService", "Ingest")
    assert (delta("ingestion", *ingest, "OK"), delta("ingestion", *ingest, "Unauthenticated")) == (1, 1)
    assert delta("training", "cheems.v1.TrainingService", "ListModels", "OK") == 1
    assert delta("evaluation", "cheems.v1.EvaluationService", "GetRun", "InvalidArgument") == 1
    assert delta("scorer", "cheems.v1.RewardService", "Score", "OK") == 1
    for name in ("annotation", "eval-worker", "eval-sink", "training", "evaluation", "scorer"):
        assert delta(name, *ingest, "OK") == 0, name  # each counts its own calls only
    stored = {"result": "stored"}
    assert (
        sample_value(after["ingestion"], "cheems_ingest_records_total", stored)
        == sample_value(before["ingestion"], "cheems_ingest_records_total", stored) + 1
    )

    # the intake opens the sample's tasks: the store's gauge on the annotation service shows them
    annotation = eventually(
        lambda: scrape(urls["annotation"]),
        lambda f: sample_value(f, "cheems_annotation_tasks", {"state": "open"}) > 0,
    )
    assert sample_value(annotation, "cheems_annotation_tasks", {"state": "open"}) > 0
    lags = [s for s in series(annotation, "cheems_bus_consumer_lag") if s["topic"] == topics.SAMPLES]
    assert lags and all(s["group"] and s["partition"].isdigit() for s in lags)
    assert {s["state"] for s in series(after["training"], "cheems_trainings")} >= {"pending", "running", "failed"}
    assert {s["stage"] for s in series(after["training"], "cheems_models")} >= {"candidate", "production"}
    assert {s["state"] for s in series(after["evaluation"], "cheems_eval_runs")} == {"running", "succeeded", "failed"}
    assert "cheems_eval_items_scored" in after["eval-sink"] and "cheems_bus_consumer_lag" in after["eval-worker"]


def test_a_record_that_does_not_decode_is_a_dead_letter(running_up: RunningUp, urls: dict[str, str]) -> None:
    url = urls["annotation"]

    def dead(families: dict[str, Any]) -> float:
        groups = {s["group"] for s in series(families, "cheems_bus_dead_letters_total") if s["topic"] == topics.SAMPLES}
        name = "cheems_bus_dead_letters_total"
        return sum(sample_value(families, name, {"topic": topics.SAMPLES, "group": g}) for g in groups)

    before = dead(scrape(url))
    publisher = Publisher(f"127.0.0.1:{running_up.config.port(BROKER_PORT)}")
    try:
        publisher.confirm([publisher.send_raw(topics.SAMPLES, b"junk", b"\xff not a protobuf", [])], timeout=30)
    finally:
        publisher.close()
    assert eventually(lambda: dead(scrape(url)), lambda n: n == before + 1) == before + 1


def test_a_restart_is_counted_on_cheems_ups_metrics(running_up: RunningUp, urls: dict[str, str]) -> None:
    restarts = {"process": "eval-sink"}
    before = sample_value(scrape(urls["up"]), "cheems_up_restarts_total", restarts)
    os.kill(running_up.supervisor.pids()["eval-sink"], signal.SIGKILL)
    after = eventually(
        lambda: sample_value(scrape(urls["up"]), "cheems_up_restarts_total", restarts), lambda n: n > before
    )
    assert after == before + 1
    assert sample_value(scrape(urls["up"]), "cheems_up_restarts_total", {"process": "ingestion"}) == 0


def test_the_judges_verdicts_are_counted_on_its_metrics_and_the_annotation_services(
    running_up: RunningUp, urls: dict[str, str]
) -> None:
    """The judge submits through the annotation service: its submitted verdicts, the service's stored AI annotations
    and the store agree; the judge consumes nothing from Kafka."""
    submitted, ai = {"outcome": "submitted"}, {"kind": "ai"}
    item = read_bench(JUDGED)[0]
    sample = common_pb2.Sample(
        prompt=item.input, responses=[common_pb2.Response(id=r.id, content=r.content) for r in item.responses],
        category=list(item.category), source=AI_SOURCE,
    )  # fmt: skip
    with open_channel(f"127.0.0.1:{running_up.config.port(hosting.INGESTION_PORT)}",
                      token=running_up.token(OPERATOR_ACCOUNT)) as channel:  # fmt: skip
        stub = ingestion_pb2_grpc.IngestionServiceStub(channel)
        assert stub.Ingest(iter([ingestion_pb2.IngestRecord(sample=sample, line=1)]), timeout=60).stored == 1
    # once the judge is done with the prompt, both counters equal the AI annotations the store holds
    engine = create_engine_for(StoreConfig(running_up.config.database))
    try:

        def counted_and_stored() -> tuple[float, float, int]:
            with session_scope(engine) as session:
                stored = session.scalar(select(func.count()).select_from(Annotation).where(Annotation.kind == "ai"))
            judged = sample_value(scrape(urls["judge"]), "cheems_judge_pairs_total", submitted)
            return judged, sample_value(scrape(urls["annotation"]), "cheems_annotations_total", ai), int(stored or 0)

        counted = eventually(counted_and_stored, lambda c: c[2] > 0 and c[0] == c[1] == c[2])
    finally:
        engine.dispose()
    assert counted[2] > 0 and counted[0] == counted[1] == counted[2], counted
    families = scrape(urls["judge"])
    assert series(families, "cheems_bus_consumer_lag") == []  # no Kafka: it calls the annotation service
    assert handled(families, "grpc.health.v1.Health", "Check", "OK") >= 1
