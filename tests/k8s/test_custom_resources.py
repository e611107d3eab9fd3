"""Custom resources against their operators' published CRDs (tests/k8s/crds/: Strimzi 1.2.0, Kubeflow Trainer v2),
every object closed to fields its schema does not declare, as `kubectl apply --validate=strict` refuses them; and
what a schema cannot say (cluster labels, the Kafka version against the Strimzi release, topics against the bus).

The legacy PyTorchJob (training-operator 1.x, whose source Kubeflow removed) keeps a schema of the parts it uses.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from services.bus import topics
from tests.k8s.crd_schema import crd_schema, groups, strimzi_kafka_versions
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

# Strimzi 1.2.0's KafkaUser CRD (044-Crd-kafkauser.yaml) is not vendored: no copy of it could be fetched here
# (the stored copies are 0.x, `v1beta1`). This is the part the manifests use, as Strimzi 1.x documents it
# (kafka.strimzi.io/v1 serves `operations` lists only: the singular `operation` of v1beta2 is gone).
ACL_OPERATIONS = ["Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "AlterConfigs",
                  "DescribeConfigs", "IdempotentWrite", "All"]  # fmt: skip
KAFKAUSER = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kafka.strimzi.io/v1"},
        "kind": {"const": "KafkaUser"},
        "metadata": METADATA,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "authentication": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["type"],
                    "properties": {"type": {"enum": ["tls", "tls-external", "scram-sha-512"]}},
                },
                "authorization": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["type", "acls"],
                    "properties": {
                        "type": {"enum": ["simple"]},
                        "acls": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["resource", "operations"],
                                "properties": {
                                    "type": {"enum": ["allow", "deny"]},
                                    "host": {"type": "string"},
                                    "operations": {
                                        "type": "array",
                                        "minItems": 1,
                                        "items": {"enum": ACL_OPERATIONS},
                                    },
                                    "resource": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["type"],
                                        "properties": {
                                            "type": {"enum": ["topic", "group", "cluster", "transactionalId"]},
                                            "name": {"type": "string"},
                                            "patternType": {"enum": ["literal", "prefix"]},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
                "quotas": {"type": "object"},
                "template": {"type": "object"},
            },
        },
    },
}

SCHEMAS = {  # CRDs not vendored (see crds/README.md): legacy training-operator 1.x's source is gone; KafkaUser above
    "PyTorchJob": PYTORCHJOB,
    "KafkaUser": KAFKAUSER,
}
RENDERED = ("overlays/dev", "overlays/prod", "kafka", "training/pytorchjob", "training/trainjob")


def schema_of(doc: dict[str, Any]) -> dict[str, Any] | None:
    return crd_schema(doc["apiVersion"], doc["kind"]) or SCHEMAS.get(doc["kind"])


def custom_resources() -> list[tuple[str, dict[str, Any]]]:
    """Every rendered resource of an operator's API group (Strimzi, Kubeflow), from every overlay that has one."""
    operators = groups() | {"kubeflow.org"}
    return [(path, d) for path in RENDERED for d in render(path) if d["apiVersion"].split("/")[0] in operators]


def check(doc: dict[str, Any]) -> None:
    schema = schema_of(doc)
    assert schema is not None, f"{doc['apiVersion']} {doc['kind']}: no vendored CRD serves this version"
    jsonschema.validate(doc, schema)


@pytest.mark.parametrize(
    "path, doc", custom_resources(), ids=lambda x: x if isinstance(x, str) else x["metadata"]["name"]
)
def test_custom_resource_matches_its_crd(path: str, doc: dict[str, Any]) -> None:
    try:
        check(doc)
    except jsonschema.ValidationError as e:
        pytest.fail(f"k8s/{path}: {doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")


def test_the_strimzi_resources_are_the_current_api() -> None:
    kinds = {(d["apiVersion"], d["kind"]) for _, d in custom_resources() if d["apiVersion"].startswith("kafka.")}
    assert kinds == {("kafka.strimzi.io/v1", k) for k in ("Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser")}


def test_what_the_schemas_refuse() -> None:
    """A misspelt field, a missing required one, a field of an older API version, a wrong type, an old apiVersion:
    each refused."""
    docs = {d["kind"]: d for _, d in custom_resources()}
    topic, kafka, pool, user = docs["KafkaTopic"], docs["Kafka"], docs["KafkaNodePool"], docs["KafkaUser"]
    acl = user["spec"]["authorization"]["acls"][0]
    job, runtime = docs["TrainJob"], docs["TrainingRuntime"]
    bad = [
        {**job, "spec": {**job["spec"], "trainer": {**job["spec"]["trainer"], "numNode": 4}}},
        {**job, "spec": {**job["spec"], "runtimeRef": {}}},  # name is required
        {**runtime, "spec": {**runtime["spec"], "mlPolicy": {"torch": {"numProcPerNode": 8}}}},  # not in v2's torch
        {**topic, "spec": {**topic["spec"], "partition": 3}},
        {**kafka, "spec": {**kafka["spec"], "zookeeper": {"replicas": 3}}},  # gone from kafka.strimzi.io/v1
        {**kafka, "spec": {**kafka["spec"], "kafka": {**kafka["spec"]["kafka"], "replicas": 3}}},
        {**pool, "spec": {**pool["spec"], "replicas": "three"}},
        {**user, "spec": {**user["spec"], "authentication": {"type": "scram-sha-256"}}},
        {
            **user,
            "spec": {**user["spec"], "authorization": {"type": "simple", "acls": [{**acl, "operations": ["Wirte"]}]}},
        },
        {
            **user,
            "spec": {
                **user["spec"],
                "authorization": {
                    "type": "simple",
                    "acls": [  # v1beta2's singular form
                        {"resource": acl["resource"], "operation": "Write"}
                    ],
                },
            },
        },
        {**kafka, "spec": {**kafka["spec"], "kafka": {**kafka["spec"]["kafka"], "authorization": {"type": "acl"}}}},
    ]
    for doc in bad:
        with pytest.raises(jsonschema.ValidationError):
            check(doc)
    with pytest.raises(AssertionError, match="no vendored CRD"):
        check({**topic, "apiVersion": "kafka.strimzi.io/v1beta2"})  # refused by Strimzi 1.x


def test_what_a_schema_cannot_say() -> None:
    """The cluster labels name the Kafka, the Kafka version is one the Strimzi release supports, KRaft roles."""
    for path in ("kafka", "overlays/prod", "overlays/dev"):
        docs = render(path)
        clusters = set(by_kind(docs, "Kafka"))
        assert clusters == {topics.STRIMZI_CLUSTER}, path
        for kind in ("KafkaNodePool", "KafkaTopic", "KafkaUser"):
            for name, doc in by_kind(docs, kind).items():
                assert doc["metadata"]["labels"]["strimzi.io/cluster"] in clusters, f"{path}: {kind}/{name}"
        for kafka in by_kind(docs, "Kafka").values():
            version = kafka["spec"]["kafka"]["version"]
            assert strimzi_kafka_versions().get(version), f"{path}: Kafka {version} is not supported by the release"
            for note in ("strimzi.io/kraft", "strimzi.io/node-pools"):  # 0.4x switches: 1.x is KRaft on node pools
                assert kafka["metadata"].get("annotations", {}).get(note, "enabled") == "enabled", note
        roles = {r for pool in by_kind(docs, "KafkaNodePool").values() for r in pool["spec"]["roles"]}
        assert roles == {"controller", "broker"}, f"{path}: a KRaft cluster needs controllers and brokers"


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
