"""Ingestion: every layout, per-record errors with line numbers, dedupe, store (SQLite and PostgreSQL),
sample events on the real broker, the gRPC stream and `cheems ingest`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, func, select

from cheems.v1 import common_pb2, events_pb2, ingestion_pb2, ingestion_pb2_grpc
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher
from services.hosting import HostConfig
from services.ingestion.records import parse_lines
from services.ingestion.server import host
from services.ingestion.service import IngestionService
from services.store.db import session_scope
from services.store.models import Prompt, Response

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
LINES = [
    json.dumps(
        {"input": "你好", "responses": [{"id": "a", "content": "好"}], "rank": {"a": 1}, "category": ["理解"]},
        ensure_ascii=False,
    ),
    json.dumps({"input": "天气", "answer1": "晴", "answer2": "雨", "preference": 1}, ensure_ascii=False),
    "{not json",
    json.dumps(
        {"prompt": "写诗", "responses": ["床前明月光", "举头望明月"], "sys_prompt": "你是诗人"}, ensure_ascii=False
    ),
    json.dumps({"prompt": "", "responses": ["x"]}),
    json.dumps({"prompt": "缺回答"}, ensure_ascii=False),
    json.dumps(
        {"input": "你好", "responses": [{"id": "a", "content": "好"}], "rank": {"a": 1}, "category": ["理解"]},
        ensure_ascii=False,
    ),
]


def test_parse_every_layout_and_report_bad_lines() -> None:
    parsed = parse_lines(LINES)
    assert [s.line for s in parsed.samples] == [1, 2, 4, 7]
    assert parsed.samples[1].responses[0][1] == "晴" and len(parsed.samples[1].responses[0][0]) == 32
    assert parsed.samples[2].system_prompt == "你是诗人"
    assert [(e.line, e.field) for e in parsed.errors] == [(3, ""), (5, "prompt"), (6, "responses")]


def test_store_dedupes_and_keeps_good_records(engine: Engine) -> None:
    parsed = parse_lines(LINES)
    summary = IngestionService(engine).ingest(parsed.samples, parsed.errors)
    assert (summary.received, summary.stored, summary.duplicates, summary.rejected) == (7, 3, 1, 3)
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Prompt)) == 3
        assert session.scalar(select(func.count()).select_from(Response)) == 5
    again = IngestionService(engine).ingest(parse_lines(LINES).samples)
    assert (again.stored, again.duplicates) == (0, 4)


def test_samples_events_on_the_broker(engine: Engine) -> None:
    with EmbeddedBroker() as broker:
        broker.create_topics([topics.SAMPLES, topics.dead_letter(topics.SAMPLES)])
        publisher = Publisher(broker.bootstrap)
        summary = IngestionService(engine, publisher).ingest(parse_lines(LINES).samples)
        seen: list[events_pb2.SampleEvent] = []
        consumer = EventConsumer(
            broker.bootstrap, [topics.SAMPLES], "ingest-test", lambda topic, key, event: seen.append(event)
        )  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while len(seen) < summary.stored and time.monotonic() < deadline:
            consumer.poll_once()
        consumer.close()
        publisher.close()
    assert sorted(e.sample.prompt for e in seen) == sorted(["你好", "天气", "写诗"])
    assert all(e.header.producer == "ingestion" and e.sample.prompt_id for e in seen)


def test_grpc_stream_and_get_sample(engine: Engine) -> None:
    grpc_host = host(IngestionService(engine), HostConfig(port=0, host="127.0.0.1")).start()
    port = grpc_host.port
    try:
        stub = ingestion_pb2_grpc.IngestionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        good = common_pb2.Sample(
            prompt="你好", responses=[common_pb2.Response(id="r1", content="好")], category=["理解"]
        )
        bad = common_pb2.Sample(prompt="你好", responses=[])
        records = [
            ingestion_pb2.IngestRecord(sample=good, line=10),
            ingestion_pb2.IngestRecord(sample=bad, line=11),
            ingestion_pb2.IngestRecord(sample=good, line=12),
        ]
        summary = stub.Ingest(iter(records), timeout=30)
        assert (summary.received, summary.stored, summary.duplicates, summary.rejected) == (3, 1, 1, 1)
        assert (summary.errors[0].line, summary.errors[0].field) == (11, "responses")
        with session_scope(engine) as session:
            prompt_id = session.scalars(select(Prompt.id)).one()
        sample = stub.GetSample(ingestion_pb2.GetSampleRequest(prompt_id=prompt_id), timeout=10)
        assert sample.prompt == "你好" and [r.id for r in sample.responses] == ["r1"]
        with pytest.raises(grpc.RpcError) as info:
            stub.GetSample(ingestion_pb2.GetSampleRequest(prompt_id="nope"), timeout=10)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        grpc_host.stop(0)


def test_cli(tmp_path: Path) -> None:
    bad = tmp_path / "mixed.jsonl"
    bad.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'c.db'}"
    run: Any = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "ingest", str(bad), "--db", db],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert "stored 3  duplicates 1  rejected 3" in run.stdout
    assert f"{bad}:3: invalid JSON" in run.stderr and f"{bad}:5: prompt: empty prompt" in run.stderr
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "ingest", str(SAMPLE / "open.jsonl"), "--db", db],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "stored 18" in run.stdout
