"""The event pipeline's own overhead against the cost of the model, and ingestion speed per database.

In one run, on the embedded broker and SQLite:
  fast   - `cheems eval --via-kafka` with a scorer whose backend returns at once (the real gRPC front,
           tokenization and Kafka path, no model): the pipeline's overhead
  tiny   - the same with the tiny Qwen2 RM on the torch backend: model cost
and ingestion of synthetic samples into SQLite and PostgreSQL (127.0.0.1:5432, a scratch schema).
Prints prompts/s and events/s (a score request and a score per prompt) and ratios.

    python bench/pipeline_bench.py [--prompts 200] [--ingest 2000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from cheems.cheemsbench import BenchItem, write_bench
from cheems.responses import Response
from evaluator.driver import evaluate_via_kafka
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.ingestion.records import SampleRecord
from services.ingestion.service import IngestionService
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.store.db import StoreConfig, create_engine_for
from services.store.migrate import upgrade
from trainer.tiny import init_tiny_model

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORDS = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方"


class InstantBackend:
    """Scores without a model: length of the token sequence. Measures everything but inference."""

    name = "instant"

    def ready(self) -> bool:
        return True

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]:
        return [float(len(s)) for s in sequences]

    def close(self) -> None:
        pass


def synth_bench(path: Path, prompts: int) -> Path:
    rng = random.Random(0)
    items = [
        BenchItem(
            f"{n}:" + "".join(rng.choices(WORDS, k=60)),
            tuple(Response(f"r{i}", "".join(rng.choices(WORDS, k=rng.randint(80, 200)))) for i in range(5)),
            {f"r{i}": rng.randint(1, 3) for i in range(5)},
            ("推理",),
        )
        for n in range(prompts)
    ]
    write_bench(path, items)
    return path


def timed_eval(bench: Path, scorer: ScorerServer, broker: EmbeddedBroker, db: str) -> float:
    upgrade(db)
    started = time.perf_counter()
    evaluate_via_kafka(
        [str(bench)],
        f"127.0.0.1:{scorer.grpc_port}",
        broker.bootstrap,
        create_engine_for(StoreConfig(db)),
        progress=False,
    )
    return time.perf_counter() - started


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--ingest", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        root = Path(tmp)
        broker.create_topics(topics.with_dead_letters())
        bench = synth_bench(root / "bench.jsonl", args.prompts)
        model = init_tiny_model(root / "tiny")
        base = {"model": str(model), "host": "127.0.0.1", "grpc_port": 0, "http_port": -1, "backend": "torch"}
        with ScorerServer(ScorerConfig(**base), backend=InstantBackend()) as fast:  # type: ignore[arg-type]
            t_fast = timed_eval(bench, fast, broker, f"sqlite:///{root / 'fast.db'}")
        with ScorerServer(ScorerConfig(**base)) as tiny:  # type: ignore[arg-type]
            t_tiny = timed_eval(bench, tiny, broker, f"sqlite:///{root / 'tiny.db'}")
        sqlite_rate = ingest_rate(f"sqlite:///{root / 'ingest.db'}", args.ingest)
        schema, pg_url = postgres_schema()
        try:
            pg_rate = ingest_rate(pg_url, args.ingest)
        finally:
            with create_engine(PG, poolclass=NullPool).begin() as connection:
                connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    n = args.prompts
    print(f"{n} prompts x 5 responses through ingest-free eval via Kafka (score request + score = 2 events/prompt)")
    print(f"  instant scorer: {t_fast:6.2f} s  {n / t_fast:7.1f} prompts/s  {2 * n / t_fast:7.1f} events/s")
    print(f"  tiny RM:        {t_tiny:6.2f} s  {n / t_tiny:7.1f} prompts/s  {2 * n / t_tiny:7.1f} events/s")
    print(f"pipeline overhead / total with the tiny RM = {t_fast / t_tiny:.2f}")
    print(
        f"ingestion ({args.ingest} samples, one transaction each): SQLite {sqlite_rate:.0f}/s, "
        f"PostgreSQL {pg_rate:.0f}/s (PostgreSQL / SQLite = {pg_rate / sqlite_rate:.2f})"
    )


if __name__ == "__main__":
    main()
