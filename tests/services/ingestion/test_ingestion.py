"""Ingestion: every layout, per-record errors with line numbers, dedupe, store (SQLite and PostgreSQL),
sample events on the real broker, the gRPC stream and `cheems ingest`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, func, select

from cheems.processes.ports import free_port
from cheems.roles import OPERATOR
from cheems.v1 import common_pb2, events_pb2, ingestion_pb2, ingestion_pb2_grpc
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher
from services.bus.relay import RelayConfig
from services.channels import open_channel
from services.hosting import HostConfig
from services.ingestion.records import Parsed, read_samples
from services.ingestion.server import host
from services.ingestion.service import IngestionService
from services.store import outbox
from services.store.accounts import AccountBook
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


def parse_lines(lines: list[str]) -> Parsed:
    """The lines read as a file would be (each record's errors by line)."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "lines.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return read_samples(path)


def test_parse_every_layout_and_report_bad_lines() -> None:
    parsed = parse_lines(LINES)
    assert [s.line for s in parsed.samples] == [1, 2, 4, 7]
    assert parsed.samples[1].responses[0][1] == "晴" and len(parsed.samples[1].responses[0][0]) == 32
    assert parsed.samples[2].system_prompt == "你是诗人"
    assert [(e.line, e.field) for e in parsed.errors] == [(3, ""), (5, "prompt"), (6, "")]
    assert "no known layout fits the fields (prompt)" in parsed.errors[2].message


def test_store_dedupes_and_keeps_good_records(engine: Engine) -> None:
    parsed = parse_lines(LINES)
    summary = IngestionService(engine).ingest(parsed.samples, parsed.errors)
    assert (summary.received, summary.stored, summary.duplicates, summary.rejected) == (7, 3, 1, 3)
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Prompt)) == 3
        assert session.scalar(select(func.count()).select_from(Response)) == 5
    again = IngestionService(engine).ingest(parse_lines(LINES).samples)
    assert (again.stored, again.duplicates) == (0, 4)


def test_sample_events_wait_in_the_outbox_with_the_source_the_store_keeps(engine: Engine) -> None:
    nobody = Publisher(f"127.0.0.1:{free_port()}", max_block_ms=200, connect=False)  # a broker nobody runs
    service = IngestionService(engine, nobody, source="mixed.jsonl", relay=RelayConfig(sweep_every=3600))
    try:
        summary = service.ingest(parse_lines(LINES).samples)
        with session_scope(engine) as session:
            waiting = [(e.topic, e.key, topics.PAYLOADS[e.topic].FromString(e.value)) for e in outbox.take(session, 10)]
    finally:
        service.close()
    assert summary.stored == len(waiting) == 3  # stored and announced together: one event a new sample
    for topic, key, event in waiting:
        assert (topic, event.sample.prompt_id, event.header.producer) == (topics.SAMPLES, key, "ingestion")
        assert event.sample.source == "mixed.jsonl"
        with session_scope(engine) as session:
            assert session.get(Prompt, key).source == "mixed.jsonl"  # type: ignore[union-attr]


def test_samples_events_on_the_broker(engine: Engine) -> None:
    with EmbeddedBroker() as broker:
        broker.create_topics([topics.SAMPLES, topics.dead_letter(topics.SAMPLES)])
        publisher = Publisher(broker.bootstrap)
        service = IngestionService(engine, publisher)
        summary = service.ingest(parse_lines(LINES).samples)
        seen: list[events_pb2.SampleEvent] = []
        consumer = EventConsumer(
            broker.bootstrap, [topics.SAMPLES], "ingest-test", lambda topic, key, event: seen.append(event)
        )  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while len(seen) < summary.stored and time.monotonic() < deadline:
            consumer.poll_once()
        consumer.close()
        service.close()
        publisher.close()
    assert sorted(e.sample.prompt for e in seen) == sorted(["你好", "天气", "写诗"])
    assert all(e.header.producer == "ingestion" and e.sample.prompt_id for e in seen)


def test_grpc_stream_and_get_sample(engine: Engine, account: Callable[[str, str], str]) -> None:
    grpc_host = host(IngestionService(engine), HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    port = grpc_host.port
    try:
        channel = open_channel(f"127.0.0.1:{port}", token=account("etl", OPERATOR))
        stub = ingestion_pb2_grpc.IngestionServiceStub(channel)
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
        turns = [
            common_pb2.Message(role="user", content="在吗？"),
            common_pb2.Message(role="assistant", content="在。"),
        ]
        in_context = common_pb2.Sample(prompt="你好", responses=good.responses, history=turns)
        nul = common_pb2.Sample(prompt="你\x00好", responses=good.responses)
        records = [
            ingestion_pb2.IngestRecord(sample=in_context, line=1),
            ingestion_pb2.IngestRecord(sample=nul, line=2),
        ]
        summary = stub.Ingest(iter(records), timeout=30)
        assert (summary.stored, summary.rejected) == (1, 1)  # the same text after earlier turns is another prompt
        assert summary.errors[0].line == 2 and "NUL" in summary.errors[0].message
        with session_scope(engine) as session:
            prompt_id = session.scalars(select(Prompt.id).where(Prompt.history.is_not(None))).one()
        sample = stub.GetSample(ingestion_pb2.GetSampleRequest(prompt_id=prompt_id), timeout=10)
        assert [(m.role, m.content) for m in sample.history] == [("user", "在吗？"), ("assistant", "在。")]
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
    assert run.returncode == 1, run.stderr  # some rejected: the good ones are stored all the same
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
    assert run.returncode == 0, run.stderr


def test_community_layouts_ingest_with_their_system_prompt_and_history(engine: Engine, tmp_path: Path) -> None:
    from tests.cheems.formats.test_layouts import MULTI_TURN, SINGLE_TURN

    path = tmp_path / "community.jsonl"
    records = [*MULTI_TURN.values(), *SINGLE_TURN.values()]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    parsed = read_samples(path)
    assert parsed.errors == []
    service = IngestionService(engine, source="community.jsonl")
    summary = service.ingest(parsed.samples)
    # 5 layouts of the multi-turn conversation and 5 of the single-turn one make 3 prompts in context (the
    # alpaca-input prompt is instruction + input); the official-layout record adds its own ids c and r
    assert (summary.stored, summary.rejected) == (4, 0)
    with session_scope(engine) as session:
        prompts = {p.id: p for p in session.scalars(select(Prompt))}
    assert len(prompts) == 3
    with_history = [p for p in prompts.values() if p.history]
    assert len(with_history) == 1
    sample = service.get(with_history[0].id)
    assert sample is not None
    assert sample.system_prompt == "你是一个乐于助人的助手。"
    assert [(m.role, m.content) for m in sample.history] == [
        ("user", "你好！"),
        ("assistant", "你好，有什么可以帮你？"),
    ]
    plain = [p for p in prompts.values() if p.text == with_history[0].text and not p.history]
    assert len(plain) == 1 and plain[0].id != with_history[0].id  # the same question without context is another prompt
