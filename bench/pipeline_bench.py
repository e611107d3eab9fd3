"""The Kafka evaluation's speed, its start-up, where its time goes; and ingestion speed per database.

In one run, on embedded brokers and SQLite, each scorer in a process of its own (as deployed):
  null    - a RewardService that answers at once without tokenizing: the pipeline's own ceiling
  instant - the real scorer (gRPC front, chat template, tokenization) whose backend returns at once
  tiny    - the real scorer with the tiny Qwen2 RM on the torch backend: model cost
it prints
  - steady state: prompts/s of a run through a worker and a sink that have joined their groups already
    (polled by threads, as `cheems eval --via-kafka` does), batched (WorkerConfig / SinkConfig defaults)
    and per message (batch size 1: the path before batching), and their ratio, per scorer; for the
    instant scorer also its own ScoreBatch rate without Kafka (what the pipeline can reach at most);
  - a CheemsBench-sized run (2,492 prompts x 5 synthetic responses) through `run_via_kafka`: wall time
    including migrations, broker start, topics and group joins;
  - where the batched steady-state time goes: consumer poll / decode / handler / commit, the worker's
    scoring and producing, the sink's DB writes, completion checks and metrics;
  - ingestion of synthetic samples into SQLite and PostgreSQL (127.0.0.1:5432, a scratch schema).

    python bench/pipeline_bench.py [--prompts 2492] [--baseline 300] [--tiny 200] [--ingest 2000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from cheems.formats.cheemsbench import BenchItem, read_bench, write_bench
from cheems.formats.responses import Response
from cheems.v1 import reward_pb2
from evaluator.evaluate import BenchCache
from evaluator.pipeline.driver import polled, run_via_kafka, watch_run
from evaluator.pipeline.runs import start_run
from evaluator.pipeline.sink import ResultSink, SinkConfig
from evaluator.pipeline.worker import ScoreWorker, WorkerConfig
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.ingestion.records import SampleRecord
from services.ingestion.service import IngestionService
from services.scorer.client import RewardClient
from services.store.db import StoreConfig, create_engine_for
from services.store.migrate import upgrade
from trainer.tiny import init_tiny_model

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORDS = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方"
CHEEMSBENCH = 2492  # prompts in CheemsBench (open + human subsets)
PER_MESSAGE = (WorkerConfig(batch_size=1, call_items=1), SinkConfig(batch_size=1))
BATCHED = (WorkerConfig(), SinkConfig())


class InstantBackend:
    """Scores without a model: length of the token sequence. Measures everything but inference."""

    name = "instant"
    prefix_sharing = False

    def ready(self) -> bool:
        return True

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]:
        return [float(len(s)) for s in sequences]

    def close(self) -> None:
        pass


def serve_scorer(kind: str, model: str, ports: Any) -> None:
    """A scorer process: "null" (no tokenizing), "instant" or "tiny" (the real scorer); puts its port in `ports`."""
    if kind == "null":
        return serve_null(ports)
    from services.scorer.config import ScorerConfig
    from services.scorer.runtime import ScorerServer

    config = ScorerConfig(model=model, host="127.0.0.1", grpc_port=0, http_port=-1, backend="torch")
    with ScorerServer(config, backend=InstantBackend() if kind == "instant" else None) as server:
        ports.put(server.grpc_port)
        server.wait()


def serve_null(ports: Any) -> None:
    from concurrent import futures

    import grpc

    from cheems.v1 import reward_pb2_grpc

    def reply(request: reward_pb2.ScoreRequest) -> reward_pb2.ScoreResponse:
        return reward_pb2.ScoreResponse(scores=[float(len(r)) for r in request.responses], model="null")

    class Null(reward_pb2_grpc.RewardServiceServicer):
        def Score(self, request: Any, context: Any) -> Any:
            return reply(request)

        def ScoreBatch(self, request: Any, context: Any) -> Any:
            return reward_pb2.ScoreBatchResponse(results=[reply(item) for item in request.items])

    server = grpc.server(futures.ThreadPoolExecutor(4))
    reward_pb2_grpc.add_RewardServiceServicer_to_server(Null(), server)
    ports.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    server.wait_for_termination()


class ScorerProcess:
    def __init__(self, kind: str, model: Path) -> None:
        context = multiprocessing.get_context("spawn")
        ports = context.Queue()
        self.process = context.Process(target=serve_scorer, args=(kind, str(model), ports), daemon=True)
        self.process.start()
        self.url = f"127.0.0.1:{ports.get(timeout=300)}"
        with RewardClient(self.url) as client:  # the first call pays for lazy set-up, not the measurement
            client.score("预热", ["好"])

    def __enter__(self) -> ScorerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.kill()
        self.process.join()


def synth_bench(path: Path, prompts: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    items = [
        BenchItem(
            f"{seed}-{n}:" + "".join(rng.choices(WORDS, k=60)),
            tuple(Response(f"r{i}", "".join(rng.choices(WORDS, k=rng.randint(80, 200)))) for i in range(5)),
            {f"r{i}": rng.randint(1, 3) for i in range(5)},
            ("推理",),
        )
        for n in range(prompts)
    ]
    write_bench(path, items)
    return path


@dataclass
class Steady:
    prompts: int
    seconds: float  # from StartRun to the stored metrics
    join_s: float  # the worker's and the sink's group joins (in parallel), before the run
    publish_s: float  # StartRun: reading the bench, recording the run, publishing its requests
    worker: ScoreWorker
    sink: ResultSink

    @property
    def rate(self) -> float:
        return self.prompts / self.seconds


def steady(bench: Path, warm: Path, scorer_url: str, db: str, configs: tuple[WorkerConfig, SinkConfig]) -> Steady:
    """A run of `bench` through a worker and a sink that joined their groups during a warm-up run of `warm`."""
    upgrade(db)
    engine, cache = create_engine_for(StoreConfig(db)), BenchCache()
    with EmbeddedBroker() as broker:
        broker.create_topics(topics.with_dead_letters())
        publisher = Publisher(broker.bootstrap)
        worker = ScoreWorker(broker.bootstrap, scorer_url, config=configs[0])
        sink = ResultSink(broker.bootstrap, engine, configs[1], cache=cache)
        try:
            with polled([worker.consumer, sink.consumer]) as polling:
                watch_run(
                    engine, start_run(engine, publisher, [str(warm)], scorer_url, cache=cache), polling, 600, False
                )
                join_s = max(worker.consumer.stats.join_s, sink.consumer.stats.join_s)
                reset(worker, sink)
                started = time.perf_counter()
                run_id = start_run(engine, publisher, [str(bench)], scorer_url, cache=cache)
                published = time.perf_counter()
                watch_run(engine, run_id, polling, 3600, False)
                done = time.perf_counter()
        finally:
            for closing in (worker, sink, publisher):
                closing.close()
    engine.dispose()
    prompts = len(read_bench(bench))
    return Steady(prompts, done - started, join_s, published - started, worker, sink)


def reset(worker: ScoreWorker, sink: ResultSink) -> None:
    for holder in (worker, sink, worker.consumer, sink.consumer):
        holder.stats = type(holder.stats)()


def scorer_alone(bench: Path, scorer_url: str, call_items: int) -> float:
    """Prompts/s of ScoreBatch calls of `call_items` prompts, one after another, without Kafka."""
    requests = [
        reward_pb2.ScoreRequest(prompt=i.input, responses=[r.content for r in i.responses]) for i in read_bench(bench)
    ]
    with RewardClient(scorer_url) as client:
        started = time.perf_counter()
        for start in range(0, len(requests), call_items):
            client.score_batch(requests[start : start + call_items])
        return len(requests) / (time.perf_counter() - started)


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def breakdown(run: Steady) -> list[str]:
    """Where the steady-state run's time went, per component (seconds, added up over the run)."""
    w, wc, s, sc = run.worker.stats, run.worker.consumer.stats, run.sink.stats, run.sink.consumer.stats
    wall = run.seconds
    rows = [
        ("StartRun: read bench, record run, publish requests", run.publish_s),
        ("worker: poll (fetching requests)", wc.poll_s),
        ("worker: waiting for requests (empty polls)", wc.idle_s),
        ("worker: decode", wc.decode_s),
        ("worker: scorer calls (ScoreBatch)", w.score_s),
        ("worker: produce scores + flush", w.publish_s),
        ("worker: commit offsets", wc.commit_s),
        ("sink: poll (fetching scores)", sc.poll_s),
        ("sink: waiting for scores (empty polls)", sc.idle_s),
        ("sink: decode", sc.decode_s),
        ("sink: DB writes (one transaction per batch)", s.store_s),
        (f"sink: completion checks ({s.checks})", s.check_s),
        ("sink: metrics of the complete run, stored + published", s.finish_s),
        ("sink: commit offsets", sc.commit_s),
    ]
    lines = [f"    {name:55s} {seconds:6.2f} s  {seconds / wall:6.1%}" for name, seconds in rows]
    lines.append(f"    batches: worker {wc.batches} ({w.calls} scorer calls), sink {sc.batches}; wall {wall:.2f} s")
    return lines


def ingest_rate(url: str, count: int) -> float:
    upgrade(url)
    rng = random.Random(1)
    samples = [
        SampleRecord(
            f"{n}:" + "".join(rng.choices(WORDS, k=40)),
            tuple((f"r{i}", "".join(rng.choices(WORDS, k=120))) for i in range(5)),
            ("推理",),
            None,
            n,
        )
        for n in range(count)
    ]
    started = time.perf_counter()
    IngestionService(create_engine_for(StoreConfig(url))).ingest(samples)
    return count / (time.perf_counter() - started)


def postgres_schema() -> tuple[str, str]:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with create_engine(PG, poolclass=NullPool).begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    return schema, make_url(PG).update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(False)


def ingestion(count: int, root: Path) -> str:
    sqlite_rate = ingest_rate(f"sqlite:///{root / 'ingest.db'}", count)
    schema, pg_url = postgres_schema()
    try:
        pg_rate = ingest_rate(pg_url, count)
    finally:
        with create_engine(PG, poolclass=NullPool).begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    return (
        f"ingestion ({count} samples, one transaction each): SQLite {sqlite_rate:.0f}/s, "
        f"PostgreSQL {pg_rate:.0f}/s (PostgreSQL / SQLite = {pg_rate / sqlite_rate:.2f})"
    )


def line(name: str, run: Steady) -> str:
    return f"  {name:12s} {run.prompts:5d} prompts {run.seconds:6.2f} s {run.rate:7.0f} prompts/s"


@dataclass(frozen=True)
class Benches:
    """Bench files of the same shape and different texts: the scorer's tokenizer caches what it has seen,
    so no measurement gets texts an earlier one tokenized already."""

    full: Path  # the batched steady-state run
    cheemsbench: Path  # the run through run_via_kafka
    alone: Path  # the scorer without Kafka
    small: Path  # the per-message run
    warm: Path  # the warm-up run that joins the groups

    @classmethod
    def make(cls, root: Path, prompts: int, baseline: int) -> Benches:
        sizes = {"full": prompts, "cheemsbench": prompts, "alone": prompts, "small": baseline, "warm": 8}
        return cls(
            **{name: synth_bench(root / f"{name}.jsonl", n, seed) for seed, (name, n) in enumerate(sizes.items())}
        )


def scorer_figures(kind: str, model: Path, benches: Benches, dbs: Iterator[str]) -> tuple[list[str], Steady]:
    """Steady state batched and per message, the scorer alone (instant), and the CheemsBench-sized run."""
    b = benches
    with ScorerProcess(kind, model) as scorer:
        batched = steady(b.full, b.warm, scorer.url, next(dbs), BATCHED)
        per_message = steady(b.small, b.warm, scorer.url, next(dbs), PER_MESSAGE)
        cheemsbench = timed(lambda: run_via_kafka([str(b.cheemsbench)], scorer.url, next(dbs), progress=False))
        alone = scorer_alone(b.alone, scorer.url, BATCHED[0].call_items) if kind == "instant" else 0.0
    out = [f"{kind} scorer, steady state (groups joined):", line("batched", batched), line("per message", per_message)]
    out.append(f"  batched / per message = {batched.rate / per_message.rate:.1f}x")
    if alone:
        out.append(f"  the scorer alone (ScoreBatch calls, no Kafka): {alone:.0f} prompts/s")
        out.append(f"  pipeline / scorer alone = {batched.rate / alone:.2f}")
    out.append(f"  {batched.prompts} x 5 via run_via_kafka (migrate, broker, topics, joins, run): {cheemsbench:.2f} s")
    out.append(f"  group joins (worker and sink at once) before the steady-state run: {batched.join_s:.2f} s")
    return out, batched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=CHEEMSBENCH, help="prompts of the batched and CheemsBench runs")
    parser.add_argument("--baseline", type=int, default=300, help="prompts of the per-message runs")
    parser.add_argument("--tiny", type=int, default=200, help="prompts of the tiny RM runs (0: none)")
    parser.add_argument("--ingest", type=int, default=2000)
    args = parser.parse_args()
    out: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = init_tiny_model(root / "tiny")
        benches = Benches.make(root, args.prompts, args.baseline)
        dbs = iter(f"sqlite:///{root / f'run{n}.db'}" for n in range(100))
        batched: dict[str, Steady] = {}
        for kind in ("null", "instant"):
            lines, batched[kind] = scorer_figures(kind, model, benches, dbs)
            out += lines
        if args.tiny:
            tiny_bench = synth_bench(root / "tiny.jsonl", args.tiny, seed=9)
            with ScorerProcess("tiny", model) as scorer:
                tiny = steady(tiny_bench, benches.warm, scorer.url, next(dbs), BATCHED)
            with ScorerProcess("instant", model) as scorer:  # a fresh process: nothing of tiny.jsonl cached
                fast = steady(tiny_bench, benches.warm, scorer.url, next(dbs), BATCHED)
            out += ["tiny RM, steady state:", line("batched", tiny)]
            out.append(f"pipeline overhead / total with the tiny RM = {fast.seconds / tiny.seconds:.2f}")
        for kind, run in batched.items():
            out.append(f"where the batched steady-state time goes ({kind} scorer; the worker and the sink overlap):")
            out.extend(breakdown(run))
        out.append(ingestion(args.ingest, root))
    print("\n".join(out))


if __name__ == "__main__":
    main()
