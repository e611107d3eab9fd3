"""The loop as services, timed: one section per stage (run them all, or name some).

switch - `cheems serve --follow`: the time from a promotion's event (a ModelEvent whose step ends in
         production, on cheems.models.v1, as the outbox relay publishes it) to the scorer serving the model
         by default (the first unpinned Score reply naming it), on the torch backend and on Triton (every
         model bound into the scorer's one PyTriton-started Triton), with 4 clients calling Score throughout;
         "cold": the model is loaded when promoted, "evaluated": a call named it before (as the gate's
         evaluation does), so the promotion takes the loaded copy. Prints the median, min and max over
         `--switches` switches, the clients' p50/p99 latency outside and during the switches, and their ratio.
         Tiny RMs (hidden 32, 2 layers, the real Qwen2 vocabulary), the embedded broker, a SQLite store.

pinned - a call naming a registered model the scorer has not loaded: its latency (the model loaded on
         demand) and the next calls', as ratios of a warm call to the default model, and the scorer's memory
         growth per model loaded (in-process RSS: the torch model; on Triton, the Triton server's memory is
         its own process's and is not counted).

ranking - annotation: the time from a prompt's last annotation (the SubmitAnnotation that closes its last open
         task, over gRPC) to its RankingEvent on cheems.rankings.v1 (resolved in that submit's transaction,
         relayed from the store's outbox); p50/p99 over `--prompts` prompts of 5 responses (5 triple tasks
         each), one prompt at a time, against the submit call's own latency. The embedded broker and
         SQLite (or `--db URL`: an empty database or schema, migrated here).

    python bench/loop_bench.py [switch] [--switches 5] [--backends torch,triton]
    python bench/loop_bench.py pinned [--backends torch,triton]
    python bench/loop_bench.py ranking [--prompts 50] [--db postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from cheems.v1 import events_pb2, reward_pb2, reward_pb2_grpc, training_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.channels import open_channel
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store import lifecycle, registry
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from trainer.tiny import init_tiny_model

REQUEST = reward_pb2.ScoreRequest(prompt="写一句关于春天的诗。", responses=["春风又绿江南岸。", "不知道。"])
DATASET = "b" * 64


def register(url: str, path: Path) -> training_pb2.Model:
    engine = create_engine_for(StoreConfig(url))
    try:
        with session_scope(engine) as session:
            registry.add_dataset(session, DATASET, "human", "data.jsonl", 1, 1, 1)
            training = registry.create_training(session, DATASET, "tiny-cpu", {}, "local", "out/{id}")
            model, _ = registry.register_model(session, training.id, str(path), None)
            created = Timestamp()
            created.FromDatetime(model.created_at)
            return training_pb2.Model(model_id=model.id, path=model.path, training_id=training.id, created_at=created)
    finally:
        engine.dispose()


def promote(url: str, model_id: str) -> None:
    """`cheems models promote`: the store's step (its event is published by the caller, as a relay would)."""
    engine = create_engine_for(StoreConfig(url))
    try:
        with session_scope(engine) as session:
            lifecycle.promote(session, model_id, "person:bench")
    finally:
        engine.dispose()


class Clients:
    """`n` threads calling Score back to back; each reply's (start, latency, model)."""

    def __init__(self, port: int, n: int = 4) -> None:
        self.calls: list[tuple[float, float, str]] = []
        self._stop = threading.Event()
        self._channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._threads = [threading.Thread(target=self._run) for _ in range(n)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        stub = reward_pb2_grpc.RewardServiceStub(self._channel)
        while not self._stop.is_set():
            started = time.perf_counter()
            reply = stub.Score(REQUEST, timeout=60)
            self.calls.append((started, time.perf_counter() - started, reply.model))

    def first_reply_of(self, model_id: str, after: float) -> float | None:
        ends = [s + took for s, took, m in list(self.calls) if m == model_id and s >= after]
        return min(ends) if ends else None

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        self._channel.close()


def wait(condition: Callable[[], float | None], seconds: float = 300) -> float:
    end = time.monotonic() + seconds
    while (value := condition()) is None:
        if time.monotonic() > end:
            raise TimeoutError("the scorer did not switch")
        time.sleep(0.01)
    return value


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def switch_times(backend: str, switches: int, broker: EmbeddedBroker, root: Path, evaluated: bool) -> None:
    """`evaluated`: each model is scored by id before its promotion, as the gate's evaluation scores a candidate
    (the promotion then takes the copy already loaded); otherwise it is loaded when promoted."""
    url = f"sqlite:///{root / f'{backend}-{evaluated}.db'}"
    upgrade(url)
    paths = [init_tiny_model(root / f"seed{seed}", hidden_size=32, layers=2, seed=seed) for seed in (1, 2)]
    promote(url, register(url, paths[0]).model_id)
    fields = {"follow": True, "bootstrap": broker.bootstrap, "db": url, "backend": backend, "http_port": -1}
    config = ScorerConfig(grpc_port=0, **fields)  # type: ignore[arg-type]
    publisher = Publisher(broker.bootstrap)
    publisher.producer.partitions_for(topics.MODELS)  # the producer's first metadata fetch, before timing
    took: list[float] = []
    windows: list[tuple[float, float]] = []
    with ScorerServer(config) as server:
        clients = Clients(server.grpc_port)
        time.sleep(2.0)
        for i in range(switches):
            model = register(url, paths[(i + 1) % 2])
            if evaluated:
                pinned = reward_pb2.ScoreRequest(prompt="你好", responses=["一", "二"], model=model.model_id)
                with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                    reward_pb2_grpc.RewardServiceStub(channel).Score(pinned, timeout=300)
                time.sleep(2.0)
            promote(url, model.model_id)
            published = time.perf_counter()
            step = training_pb2.ModelChange(model_id=model.model_id, action="promoted", to_state="production")
            publisher.publish(topics.MODELS, model.model_id, events_pb2.ModelEvent(model=model, change=step))
            publisher.flush()
            served = wait(lambda m=model.model_id, t=published: clients.first_reply_of(m, t))  # type: ignore[misc]
            took.append(served - published)
            windows.append((published, served))
            time.sleep(2.0)
        clients.stop()
    publisher.close()
    during = [d for s, d, _ in clients.calls if any(a <= s <= b for a, b in windows)]
    outside = [d for s, d, _ in clients.calls if not any(a <= s <= b for a, b in windows)]
    p99 = percentile(during, 0.99) / percentile(outside, 0.99)
    print(
        f"  {backend:6} {'evaluated' if evaluated else 'cold':9}  event -> serving: median "
        f"{statistics.median(took):5.2f} s (min {min(took):.2f}, max {max(took):.2f}, {switches} switches)   "
        f"Score p50/p99 outside {1e3 * percentile(outside, 0.5):.0f}/{1e3 * percentile(outside, 0.99):.0f} ms, "
        f"during {1e3 * percentile(during, 0.5):.0f}/{1e3 * percentile(during, 0.99):.0f} ms: p99 {p99:.1f}x"
    )


def switch_section(args: argparse.Namespace) -> None:
    print("switch: a promotion's event -> the scorer serving the model (`cheems serve --follow`, 4 clients)")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        broker.create_topics(topics.with_dead_letters())
        for backend in args.backends.split(","):
            for evaluated in (False, True):
                switch_times(backend, args.switches, broker, Path(tmp), evaluated)


def rss_mib() -> float:
    """This process's resident memory (Linux /proc), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pinned_section(args: argparse.Namespace) -> None:
    print("pinned: a call naming a model not loaded yet (`cheems serve --follow`, loaded on demand), 1 client")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        broker.create_topics(topics.with_dead_letters())
        root = Path(tmp)
        paths = [init_tiny_model(root / f"seed{seed}", hidden_size=32, layers=2, seed=seed) for seed in (1, 2, 3)]
        for backend in args.backends.split(","):
            url = f"sqlite:///{root / f'pinned-{backend}.db'}"
            upgrade(url)
            promote(url, register(url, paths[0]).model_id)
            others = [register(url, path).model_id for path in paths[1:]]
            fields = {"follow": True, "bootstrap": broker.bootstrap, "db": url, "backend": backend}
            config = ScorerConfig(grpc_port=0, http_port=-1, **fields)  # type: ignore[arg-type]
            with ScorerServer(config) as server, grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                stub = reward_pb2_grpc.RewardServiceStub(channel)

                def call(model: str, stub: Any = stub) -> float:
                    named = reward_pb2.ScoreRequest()
                    named.CopyFrom(REQUEST)
                    named.model = model
                    started = time.perf_counter()
                    stub.Score(named, timeout=300)
                    return time.perf_counter() - started

                warm = statistics.median(call("") for _ in range(20))
                before = rss_mib()
                first = [call(model_id) for model_id in others]  # each loaded by its first call
                grown = (rss_mib() - before) / len(others)
                loaded = statistics.median(call(others[0]) for _ in range(20))
            print(
                f"  {backend:6}  first call of an unloaded model {statistics.median(first):6.2f} s "
                f"({statistics.median(first) / warm:,.0f}x a warm call of {1e3 * warm:.1f} ms); then "
                f"{1e3 * loaded:.1f} ms ({loaded / warm:.2f}x); scorer memory +{grown:.0f} MiB per model loaded"
            )


class ArrivalTimes:
    """Reads a topic in a thread (no consumer group, fetches answered at once); when each key was first seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.seen: dict[str, float] = {}
        self._consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=5)
        self._consumer.topics()
        partitions = self._consumer.partitions_for_topic(topic) or set()
        self._consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        self._consumer.seek_to_end()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for record in [r for batch in self._consumer.poll(timeout_ms=20).values() for r in batch]:
                self.seen.setdefault(record.key.decode(), time.perf_counter())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._consumer.close()


def ranking_section(args: argparse.Namespace) -> None:
    from cheems.v1 import annotation_pb2, annotation_pb2_grpc
    from services.annotation.server import servicer_host
    from services.annotation.service import AnnotationService
    from services.hosting import HostConfig
    from services.store import repository
    from services.store.accounts import AccountBook, add_annotator

    print(f"ranking: a prompt's last annotation -> its RankingEvent ({args.prompts} prompts, 5 triples each)")
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        broker.create_topics(topics.with_dead_letters())
        url = args.db or f"sqlite:///{Path(tmp) / 'ranking.db'}"
        upgrade(url)
        engine, publisher = create_engine_for(StoreConfig(url)), Publisher(broker.bootstrap)
        service = AnnotationService(engine, publisher)
        with session_scope(engine) as session:
            token = add_annotator(session, "bench")  # each submit's account is checked, as in production
        host = servicer_host(service, HostConfig(port=0), AccountBook(engine)).start()
        arrivals = ArrivalTimes(broker.bootstrap, topics.RANKINGS)
        channel = open_channel(f"127.0.0.1:{host.port}", token=token)
        stub = annotation_pb2_grpc.AnnotationServiceStub(channel)
        tag, last_sent, submit_took = uuid.uuid4().hex[:8], {}, []
        for n in range(args.prompts + 3):  # the first three warm the path up and are not counted
            with session_scope(engine) as session:
                responses = [(f"r{i}", f"第{n}题的回答{i}") for i in range(1, 6)]
                pid, _ = repository.add_sample(session, f"第{n}题（{tag}）", responses, ["推理"])
            for i, (task_id, keys) in enumerate(service.create_tasks(pid, 3)):
                groups = [annotation_pb2.TieGroup(ids=[k]) for k in keys]
                request = annotation_pb2.Annotation(
                    annotation_id=f"{pid}:{i}",
                    prompt_id=pid,
                    task_id=task_id,
                    annotator="bench",
                    kind=annotation_pb2.ANNOTATOR_KIND_HUMAN,
                    order=annotation_pb2.OrderResult(groups=groups),
                )
                started = time.perf_counter()
                stub.SubmitAnnotation(request, timeout=30)
                if i == 4 and n >= 3:
                    last_sent[pid] = started
                    submit_took.append(time.perf_counter() - started)
            wait(lambda p=pid: arrivals.seen.get(p), 60)  # type: ignore[misc]
        arrivals.stop()
        service.close()
        host.stop(0)
        publisher.close()
        engine.dispose()
    took = [arrivals.seen[p] - t for p, t in last_sent.items()]
    print(
        f"  {make_url_name(url):10}  last annotation -> RankingEvent: p50 {1e3 * percentile(took, 0.5):.1f} ms, "
        f"p99 {1e3 * percentile(took, 0.99):.1f} ms, max {1e3 * max(took):.1f} ms   "
        f"(the SubmitAnnotation call itself: p50 {1e3 * percentile(submit_took, 0.5):.1f} ms, "
        f"p99 {1e3 * percentile(submit_took, 0.99):.1f} ms)"
    )


def make_url_name(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0]


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {
    "switch": switch_section,
    "pinned": pinned_section,
    "ranking": ranking_section,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", help=f"Sections to run, of {', '.join(SECTIONS)} (default: all).")
    parser.add_argument("--switches", type=int, default=5, help="switch: switches per backend")
    parser.add_argument("--backends", default="torch,triton", help="switch: backends, comma-separated")
    parser.add_argument("--prompts", type=int, default=50, help="ranking: prompts timed")
    parser.add_argument("--db", default="", help="ranking: database URL (default: a SQLite file)")
    args = parser.parse_args()
    if unknown := set(args.sections) - set(SECTIONS):
        parser.error(f"no section {', '.join(sorted(unknown))}; there are {', '.join(SECTIONS)}")
    for name in args.sections or SECTIONS:
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
