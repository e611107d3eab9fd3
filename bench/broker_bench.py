"""What durability costs the embedded broker: Tansu on memory (the baseline) against Tansu on disk
(`services.bus.objectstore`, every acknowledged write fsynced), in one process, rounds alternating.

Three loads, each a SampleEvent-sized record (2 KB): a burst of `--burst` records sent together and waited for
(an outbox relay's batch), `--single` records each waited for before the next (an RPC's own event), and reading
the topic from its start (a new consumer group catching up). Prints each engine's median seconds and the ratio
disk / memory.

    python bench/broker_bench.py [--burst 2000] [--single 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kafka import KafkaProducer

from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.codec import encode
from services.bus.reader import read_topic

TOPIC = topics.SAMPLES  # the brokers are the bench's own; real events, so a reader decodes them as consumers do
VALUE = encode(TOPIC, events_pb2.SampleEvent(sample=common_pb2.Sample(prompt="问" * 680)))  # about 2 KB


def burst(producer: KafkaProducer, count: int) -> float:
    started = time.perf_counter()
    futures = [
        producer.send(TOPIC, key=str(i % 64).encode(), value=VALUE.value, headers=VALUE.headers) for i in range(count)
    ]
    producer.flush()
    for future in futures:
        future.get(timeout=60)
    return time.perf_counter() - started


def single(producer: KafkaProducer, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        producer.send(TOPIC, key=str(i).encode(), value=VALUE.value, headers=VALUE.headers)
        producer.flush()  # send now, not after linger_ms: this measures the broker, not the client's wait
    return time.perf_counter() - started


def read(bootstrap: str) -> tuple[float, int]:
    """Seconds to read the topic from its start to its end, and how many records that was."""
    started = time.perf_counter()
    count = len(read_topic(bootstrap, TOPIC, timeout=600))
    return time.perf_counter() - started, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--single", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as memory, EmbeddedBroker(storage=Path(tmp)) as disk:
        producers = {}
        for name, broker in {"memory": memory, "disk": disk}.items():
            broker.create_topics([TOPIC], partitions=3)
            producers[name] = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
            burst(producers[name], 100)  # warm: metadata, connections, the topic's first objects
        for _ in range(args.rounds):
            for name, producer in producers.items():
                times.setdefault((name, "burst"), []).append(burst(producer, args.burst))
                times.setdefault((name, "single"), []).append(single(producer, args.single))
        for producer in producers.values():
            producer.close()
        for name, broker in {"memory": memory, "disk": disk}.items():
            seconds, records = read(broker.bootstrap)
            times[(name, "read")] = [seconds]
            counts = records
    print(f"records of 2 KB; median of {args.rounds} rounds (CPU host, {args.burst} burst / {args.single} single)")
    for load, count in (("burst", args.burst), ("single", args.single), ("read", counts)):
        mem, dsk = (statistics.median(times[(n, load)]) for n in ("memory", "disk"))
        print(f"{load:>6}: memory {mem:.3f} s ({count / mem:,.0f}/s)  disk {dsk:.3f} s ({count / dsk:,.0f}/s)  "
              f"disk/memory {dsk / mem:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
