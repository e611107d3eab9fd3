"""Custom resources (Kubeflow PyTorchJob, Strimzi Kafka and KafkaTopic) against the fields their CRDs define.

kubernetes-validate carries only built-in kinds; these schemas hold the parts of the CRDs we use
(training-operator v1, Strimzi v1beta2), closed to unknown fields so a typo fails here, not in the cluster.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from services.bus import topics
from tests.k8s.manifests import by_kind, render

STRING_MAP = {"type": "object", "additionalProperties": {"type": ["string", "integer", "boolean"]}}
METADATA = {"type": "object", "required": ["name"]}
POD_TEMPLATE = {"type": "object", "required": ["spec"]}  # validated as a core PodTemplate in test_render.py

PYTORCHJOB = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["pytorchReplicaSpecs"],
            "properties": {
                "nprocPerNode": {"type": "string"},
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "backoffLimit": {"type": "integer", "minimum": 0},
                        "cleanPodPolicy": {"enum": ["All", "Running", "None"]},
                        "activeDeadlineSeconds": {"type": "integer"},
                        "ttlSecondsAfterFinished": {"type": "integer"},
                    },
                },
                "pytorchReplicaSpecs": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["Master"],
                    "properties": {
                        role: {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["replicas", "template"],
                            "properties": {
                                "replicas": {"type": "integer", "minimum": 1},
                                "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
                                "template": POD_TEMPLATE,
                            },
                        }
                        for role in ("Master", "Worker")
                    },
                },
            },
        },
    },
}

KAFKA_TOPIC = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kafka.strimzi.io/v1beta2"},
        "metadata": {
            "type": "object",
            "required": ["name", "labels"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "labels": {"type": "object", "required": ["strimzi.io/cluster"]},
            },
        },
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["partitions", "replicas"],
            "properties": {
                "topicName": {"type": "string"},
                "partitions": {"type": "integer", "minimum": 1},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 32767},
                "config": STRING_MAP,
            },
        },
    },
}

KAFKA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kafka.strimzi.io/v1beta2"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["kafka"],
            "properties": {
                "kafka": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["listeners"],
                    "properties": {
                        "version": {"type": "string"},
                        "metadataVersion": {"type": "string"},
                        "listeners": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["name", "port", "type", "tls"],
                                "properties": {
                                    "name": {"type": "string", "pattern": "^[a-z0-9]{1,11}$"},
                                    "port": {"type": "integer", "minimum": 9092},
                                    "type": {"enum": ["internal", "route", "loadbalancer", "nodeport", "ingress"]},
                                    "tls": {"type": "boolean"},
                                    "networkPolicyPeers": {"type": "array"},
                                },
                            },
                        },
                        "config": STRING_MAP,
                    },
                },
                "entityOperator": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"topicOperator": {"type": "object"}, "userOperator": {"type": "object"}},
                },
            },
        },
    },
}

NODE_POOL = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kafka.strimzi.io/v1beta2"},
        "metadata": {"type": "object", "required": ["name", "labels"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["replicas", "roles", "storage"],
            "properties": {
                "replicas": {"type": "integer", "minimum": 1},
                "roles": {"type": "array", "items": {"enum": ["controller", "broker"]}, "minItems": 1},
                "storage": {"type": "object", "required": ["type"]},
                "resources": {"type": "object"},
            },
        },
    },
}

SCHEMAS = {"PyTorchJob": PYTORCHJOB, "KafkaTopic": KAFKA_TOPIC, "Kafka": KAFKA, "KafkaNodePool": NODE_POOL}


def custom_resources() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, d)
        for path in ("overlays/prod", "kafka", "training/pytorchjob")
        for d in render(path)
        if d["kind"] in SCHEMAS
    ]


@pytest.mark.parametrize(
    "path, doc", custom_resources(), ids=lambda x: x if isinstance(x, str) else x["metadata"]["name"]
)
def test_custom_resource_matches_its_crd(path: str, doc: dict[str, Any]) -> None:
    try:
        jsonschema.validate(doc, SCHEMAS[doc["kind"]])
    except jsonschema.ValidationError as e:
        pytest.fail(f"k8s/{path}: {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")


def test_a_misspelt_field_fails() -> None:
    topic = next(d for _, d in custom_resources() if d["kind"] == "KafkaTopic")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**topic, "spec": {**topic["spec"], "partition": 3}}, KAFKA_TOPIC)


def test_topics_equal_the_bus() -> None:
    """Every topic services/bus uses (with its dead letters) exists in the cluster, as specified there."""
    prod = render("overlays/prod")
    kafka_topics = {d["spec"].get("topicName", d["metadata"]["name"]): d for d in by_kind(prod, "KafkaTopic").values()}
    assert set(kafka_topics) == set(topics.with_dead_letters())
    clusters = set(by_kind(prod, "Kafka"))
    for spec in topics.SPECS:
        resource = kafka_topics[spec.name]
        assert resource["spec"]["partitions"] == spec.partitions, spec.name
        assert int(resource["spec"]["config"]["retention.ms"]) == spec.retention_ms, spec.name
        assert resource["metadata"]["labels"]["strimzi.io/cluster"] in clusters, spec.name
        assert resource["metadata"]["namespace"] == "cheems"
    kafka = by_kind(prod, "Kafka")[topics.STRIMZI_CLUSTER]["spec"]["kafka"]
    replicas = sum(p["spec"]["replicas"] for p in by_kind(prod, "KafkaNodePool").values())
    assert all(r["spec"]["replicas"] <= replicas for r in kafka_topics.values())
    assert kafka["config"]["auto.create.topics.enable"] is False
