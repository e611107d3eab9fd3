"""Topic names, their dead-letter topics, their specs, and the Strimzi KafkaTopic resources made from them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from services.bus import topics

ROOT = Path(__file__).resolve().parents[3]
TOPICS_YAML = ROOT / "k8s" / "kafka" / "topics.yaml"
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_with_dead_letters_lists_the_topics_then_their_dlqs() -> None:
    assert topics.with_dead_letters((topics.SAMPLES, topics.SCORES)) == [
        "cheems.samples.v1",
        "cheems.scores.v1",
        "cheems.samples.v1.dlq",
        "cheems.scores.v1.dlq",
    ]
    everything = topics.with_dead_letters()
    assert everything == [*topics.ALL, *(f"{t}.dlq" for t in topics.ALL)]
    assert len(set(everything)) == 2 * len(topics.ALL) == 12
    assert topics.with_dead_letters(()) == []


def test_specs_cover_every_topic_and_dead_letter_once() -> None:
    names = [spec.name for spec in topics.SPECS]
    assert names == topics.with_dead_letters()
    for spec in topics.SPECS:
        assert spec.retention_ms > 0 and spec.partitions >= 1
        if spec.name.endswith(".dlq"):
            assert (spec.partitions, spec.retention_ms) == (1, 30 * topics.DAY_MS)
        else:
            assert spec.retention_ms == 7 * topics.DAY_MS
    partitions = {spec.name: spec.partitions for spec in topics.SPECS}
    assert partitions[topics.SCORE_REQUESTS] == partitions[topics.SCORES] == 12
    assert partitions[topics.SAMPLES] == 6


def test_strimzi_resources_match_the_specs() -> None:
    docs = [d for d in yaml.safe_load_all(topics.strimzi_yaml()) if d is not None]
    assert [d["spec"]["topicName"] for d in docs] == [s.name for s in topics.SPECS]
    for doc, spec in zip(docs, topics.SPECS, strict=True):
        assert (doc["apiVersion"], doc["kind"]) == ("kafka.strimzi.io/v1beta2", "KafkaTopic")
        assert DNS_1123.match(doc["metadata"]["name"]), doc["metadata"]["name"]
        assert doc["metadata"]["labels"] == {"strimzi.io/cluster": topics.STRIMZI_CLUSTER}
        assert doc["spec"]["partitions"] == spec.partitions and doc["spec"]["replicas"] == topics.REPLICAS
        assert doc["spec"]["config"] == {"retention.ms": str(spec.retention_ms), "min.insync.replicas": "2"}
    assert len({d["metadata"]["name"] for d in docs}) == len(docs)


def test_module_prints_the_strimzi_yaml() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "services.bus.topics"], capture_output=True, text=True, timeout=60, check=True
    )
    assert run.stdout == topics.strimzi_yaml()


def test_checked_in_topics_yaml_is_current() -> None:
    assert TOPICS_YAML.read_text(encoding="utf-8") == topics.strimzi_yaml(), (
        "k8s/kafka/topics.yaml is stale: run `python -m services.bus.topics > k8s/kafka/topics.yaml`"
    )
