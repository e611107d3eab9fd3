"""Topic names, their dead-letter topics, their specs, and the Strimzi KafkaTopic resources made from them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from cheems.v1 import events_pb2
from services.bus import topics

ROOT = Path(__file__).resolve().parents[3]
TOPICS_YAML = ROOT / "k8s" / "kafka" / "topics.yaml"
EVENTS_PROTO = ROOT / "protos" / "cheems" / "v1" / "events.proto"
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_every_event_of_the_schema_has_one_topic_carrying_it() -> None:
    """events.proto marks each event message with `// topic NAME`; PAYLOADS must say the same, no more."""
    marked = dict(re.findall(r"^// topic ([^\s:]+).*\nmessage (\w+)", EVENTS_PROTO.read_text(), re.MULTILINE))
    assert marked, "no `// topic` comment found in events.proto"
    assert {topic: payload.DESCRIPTOR.name for topic, payload in topics.PAYLOADS.items()} == marked
    with_header = {
        name
        for name, message in events_pb2.DESCRIPTOR.message_types_by_name.items()
        if "header" in message.fields_by_name
        and message.fields_by_name["header"].message_type is events_pb2.EventHeader.DESCRIPTOR
    }
    assert set(marked.values()) == with_header  # every event message, each on its own topic
    assert tuple(topics.PAYLOADS) == topics.ALL


def test_topic_names_are_versioned_and_every_topic_constant_is_listed() -> None:
    versioned = re.compile(rf"^cheems\.[a-z]+(-[a-z]+)*\.v{topics.SCHEMA_VERSION}$")
    assert all(versioned.match(name) for name in topics.ALL), topics.ALL
    assert len(set(topics.ALL)) == len(topics.ALL)
    constants = {v for k, v in vars(topics).items() if k.isupper() and isinstance(v, str) and v.startswith("cheems.")}
    assert constants == set(topics.ALL)  # a topic defined but left out of ALL would never be created


def test_each_topic_has_a_dead_letter_twin() -> None:
    assert topics.with_dead_letters((topics.SAMPLES, topics.SCORES)) == [
        "cheems.samples.v1",
        "cheems.scores.v1",
        "cheems.samples.v1.dlq",
        "cheems.scores.v1.dlq",
    ]
    twins = [topics.dead_letter(t) for t in topics.ALL]
    assert all(twin == f"{t}.dlq" for t, twin in zip(topics.ALL, twins, strict=True))
    assert not set(twins) & set(topics.ALL)  # no topic doubles as another one's dead letters
    everything = topics.with_dead_letters()
    assert everything == [*topics.ALL, *twins] and len(set(everything)) == len(everything)
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
        assert (doc["apiVersion"], doc["kind"]) == ("kafka.strimzi.io/v1", "KafkaTopic")
        assert DNS_1123.match(doc["metadata"]["name"]), doc["metadata"]["name"]
        assert doc["metadata"]["labels"] == {"strimzi.io/cluster": topics.STRIMZI_CLUSTER}
        assert doc["spec"]["partitions"] == spec.partitions and doc["spec"]["replicas"] == topics.REPLICAS
        assert doc["spec"]["config"] == {
            "retention.ms": str(spec.retention_ms),
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "false",
        }
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
