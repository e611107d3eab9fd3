"""The samples topic as a consumer the project did not write sees it: confluent-kafka (librdkafka)
reading what `cheems ingest --bootstrap` published to the real embedded broker, decoded with code
generated at test time from protos/cheems/v1/*.proto alone.

The consumer runs in a subprocess whose `cheems.v1` is the freshly generated one (it checks), so
neither the project's generated package nor its codec can help it by accident.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.bus import topics
from services.bus.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[3]
OPEN = ROOT / "data" / "sample" / "open.jsonl"

# Run as `python consume.py GENERATED_DIR BOOTSTRAP TOPIC COUNT`; prints one JSON object per message.
CONSUMER = textwrap.dedent(
    """
    import json, sys, time, uuid
    from pathlib import Path

    generated, bootstrap, topic, count = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    sys.path.insert(0, str(generated))
    from cheems.v1 import events_pb2
    from confluent_kafka import Consumer
    from google.protobuf.json_format import MessageToDict

    assert Path(events_pb2.__file__).is_relative_to(generated), events_pb2.__file__
    assert "services" not in sys.modules

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"foreign-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    })
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 60
    while seen < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error():
            raise SystemExit(f"consumer error: {message.error()}")
        headers = {k: v.decode() for k, v in message.headers() or []}
        event = events_pb2.SampleEvent.FromString(message.value())
        record = {"key": message.key().decode(), "headers": headers, "event": MessageToDict(event)}
        print(json.dumps(record, ensure_ascii=False), flush=True)
        seen += 1
    consumer.close()
    """
)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics([topics.SAMPLES, topics.dead_letter(topics.SAMPLES)])
        yield running


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done


def generate_from_protos(out: Path) -> Path:
    """`cheems/v1/*_pb2.py` compiled from protos/ into `out`, made a regular package so it wins."""
    out.mkdir()
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "protos" / "cheems" / "v1").glob("*.proto"))
    run([sys.executable, "-m", "grpc_tools.protoc", "-I", "protos", f"--python_out={out}", *protos], ROOT)
    for package in (out / "cheems", out / "cheems" / "v1"):
        (package / "__init__.py").touch()
    return out


def message_type(content_type: str) -> str:
    """`messageType` from a `content-type` value such as `application/x-protobuf; messageType=a.B`."""
    media, *params = (part.strip() for part in content_type.split(";"))
    assert media == "application/x-protobuf", content_type
    found = dict(param.split("=", 1) for param in params)
    return found["messageType"].strip('"')


def test_confluent_kafka_reads_ingested_samples_with_the_protos_alone(broker: EmbeddedBroker, tmp_path: Path) -> None:
    generated = generate_from_protos(tmp_path / "generated")
    db = f"sqlite:///{tmp_path / 'c.db'}"
    ingest = run(
        [sys.executable, "-m", "cheems_cli", "ingest", str(OPEN), "--db", db, "--bootstrap", broker.bootstrap], ROOT
    )
    assert "stored 18" in ingest.stdout
    script = tmp_path / "consume.py"
    script.write_text(CONSUMER, encoding="utf-8")
    consumed = run([sys.executable, str(script), str(generated), broker.bootstrap, topics.SAMPLES, "18"], tmp_path)
    records: list[dict[str, Any]] = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert len(records) == 18
    first_input = json.loads(OPEN.read_text(encoding="utf-8").splitlines()[0])["input"]
    assert first_input in {r["event"]["sample"]["prompt"] for r in records}
    for record in records:
        headers, sample = record["headers"], record["event"]["sample"]
        assert message_type(headers["content-type"]) == "cheems.v1.SampleEvent"
        assert headers["cheems-schema-version"] == "1" and headers["cheems-type"] == "cheems.v1.SampleEvent"
        assert sample["promptId"] == record["key"] and sample["prompt"] and sample["source"] == "open.jsonl"
        assert len(sample["responses"]) >= 2 and all(r["id"] and r["content"] for r in sample["responses"])
        assert record["event"]["header"]["producer"] == "ingestion"
