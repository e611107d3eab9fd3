"""Load spread over scorer replicas, with two real `cheems serve` processes on loopback addresses.

One client (`RewardClient`, as the eval worker and the TRL reward function use it) reached through one target
naming both spreads its calls over them; when one is killed mid-run its calls go on on the other, none failed
(a call caught on the dead one is retried by the client's policy). A plain channel with no options (grpcurl, a
Go stub: one connection for its life) is made to reconnect by the server's maximum connection age, and no call
of it fails across the reconnections.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.channels import CHANNEL_OPTIONS, channel_options
from services.scorer.client import RewardClient

pytestmark = pytest.mark.slow


def serve(model: Path, model_id: str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    command = [sys.executable, "-m", "cheems_cli", "serve", "--model", str(model), "--model-id", model_id]
    command += ["--backend", "torch", "--grpc-port", "0", "--http-port", "-1", "--host", "127.0.0.1", *extra]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline() if process.stdout else ""
    assert line.startswith("serving:"), (line, process.stderr.read() if process.stderr else "")
    return process, int(line.split()[2].rsplit(":", 1)[1])


@pytest.fixture(scope="module")
def model(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, layers=2, seed=1)


@pytest.fixture(scope="module")  # shared: the Kafka test runs first, the one that kills replica-a last
def two_scorers(model: Path) -> Iterator[dict[str, tuple[subprocess.Popen[str], int]]]:
    scorers: dict[str, tuple[subprocess.Popen[str], int]] = {}
    try:
        for name in ("replica-a", "replica-b"):
            scorers[name] = serve(model, name)
        yield scorers
    finally:
        for process, _ in scorers.values():
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


def test_the_options_ask_for_round_robin_and_keepalive() -> None:
    names = dict(CHANNEL_OPTIONS)
    assert '"round_robin"' in names["grpc.service_config"] and names["grpc.keepalive_time_ms"] == 30_000
    assert dict(channel_options([("grpc.keepalive_time_ms", 5)]))["grpc.keepalive_time_ms"] == 5


def test_a_kafka_evaluation_spreads_over_two_scorers(
    two_scorers: dict[str, tuple[subprocess.Popen[str], int]], tmp_path: Path
) -> None:  # before the test that kills replica-a
    """A run through Kafka whose score worker is given one target naming both scorers: its ScoreBatch calls (of 4
    requests) go to both, and the run's 36 items are each scored once."""
    from evaluator.pipeline.runs import run_state, start_run
    from evaluator.pipeline.sink import ResultSink
    from evaluator.pipeline.worker import ScoreWorker, WorkerConfig
    from services.bus import topics
    from services.bus.broker import EmbeddedBroker
    from services.bus.client import EventConsumer, Publisher
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade
    from tests.evaluator.conftest import pumping

    target = "ipv4:" + ",".join(f"127.0.0.1:{port}" for _, port in two_scorers.values())
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    sample = Path(__file__).resolve().parents[2] / "data" / "sample"
    by_scorer: Counter[str] = Counter()
    with EmbeddedBroker() as broker:
        broker.create_topics(topics.with_dead_letters())
        publisher = Publisher(broker.bootstrap)
        run_id = start_run(engine, publisher, [str(sample / "open.jsonl"), str(sample / "human.jsonl")], target)
        worker = ScoreWorker(broker.bootstrap, target, config=WorkerConfig(call_items=4, calls_in_flight=1))
        sink = ResultSink(broker.bootstrap, engine)
        scores = EventConsumer(
            broker.bootstrap, [topics.SCORES], "spread-listener", lambda t, k, e: by_scorer.update([e.model_id])
        )
        try:
            with pumping(worker.consumer, sink.consumer, scores) as running:
                running.wait_for(lambda: run_state(engine, run_id).state == "succeeded", timeout=180, what="the run")
                running.wait_for(lambda: sum(by_scorer.values()) >= 36, what="every score event")
        finally:
            for closing in (worker, sink, scores):
                closing.close()
            publisher.close()
            engine.dispose()
    assert set(by_scorer) == {"replica-a", "replica-b"}, by_scorer
    for name, n in by_scorer.items():
        assert 0.3 <= n / sum(by_scorer.values()) <= 0.7, f"{name}: {n} of {sum(by_scorer.values())} items"


def test_one_client_spreads_over_two_scorers_and_survives_losing_one(
    two_scorers: dict[str, tuple[subprocess.Popen[str], int]],
) -> None:
    target = "ipv4:" + ",".join(f"127.0.0.1:{port}" for _, port in two_scorers.values())
    answered: list[tuple[float, str]] = []
    failed: list[str] = []
    stop = threading.Event()
    with RewardClient(target, timeout=30) as client:

        def call() -> None:
            while not stop.is_set():
                try:
                    answered.append((time.monotonic(), client.score_full("你好", ["一", "二"]).model))
                except grpc.RpcError as e:
                    failed.append(f"{e.code().name}: {e.details()}")

        threads = [threading.Thread(target=call) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 60
            while len(answered) < 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            spread = Counter(model for _, model in answered)
            two_scorers["replica-a"][0].send_signal(signal.SIGKILL)
            killed = time.monotonic()
            time.sleep(3.0)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
    assert not failed, failed[:5]
    total = sum(spread.values())
    assert total >= 100, spread
    assert set(spread) == {"replica-a", "replica-b"}, spread
    for name, n in spread.items():
        assert 0.3 <= n / total <= 0.7, f"{name}: {n} of {total} calls"
    after = [model for at, model in answered if at > killed + 1.0]
    assert after and set(after) == {"replica-b"}, Counter(after)


def test_a_plain_client_is_made_to_reconnect_without_a_failed_call(model: Path) -> None:
    process, port = serve(model, "aged", "--max-connection-age", "1", "--max-connection-age-grace", "5")
    try:
        states: list[grpc.ChannelConnectivity] = []
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:  # no options: grpcurl's, a Go stub's
            channel.subscribe(states.append)
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            request = reward_pb2.ScoreRequest(prompt="你好", responses=["一", "二"])
            end, calls = time.monotonic() + 30.0, 0  # four connections take ~3 s; a loaded machine gets longer
            while time.monotonic() < end and (states.count(grpc.ChannelConnectivity.READY) < 4 or calls <= 10):
                assert stub.Score(request, timeout=30).model == "aged"
                calls += 1
            time.sleep(0.5)
        connections = states.count(grpc.ChannelConnectivity.READY)  # after each GOAWAY: IDLE, (CONNECTING,) READY
        assert calls > 10 and connections >= 4, (calls, states)
    finally:
        process.kill()
        process.wait(timeout=30)
