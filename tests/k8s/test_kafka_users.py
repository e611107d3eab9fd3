"""The bus checks who publishes: one Strimzi KafkaUser per Kafka client, with ACLs on exactly the topics it produces
and consumes and the consumer groups it joins (the code's), every topic written by one user only (the service whose
code produces it), and every client pod connecting as its own user."""

from __future__ import annotations

from typing import Any

import pytest

from evaluator.pipeline.gate import GATE_GROUP
from evaluator.pipeline.model_runs import MODEL_EVALUATOR_GROUP
from evaluator.pipeline.sink import SINK_GROUP
from evaluator.pipeline.worker import WORKER_GROUP
from services.annotation.intake import INTAKE_GROUP
from services.bus import topics as t
from services.bus.topics import dead_letter
from tests.k8s.manifests import by_kind, containers, pod_specs, render
from trainer.service.auto import GROUP as TRAINING_GROUP

WRITE, READ = ("Write", "Describe"), ("Read", "Describe")
RELAYED = t.RELAYED_BY  # each service's outbox relay publishes its own topics and no others
# the topics a service's code publishes itself, not through its outbox relay: {topic: that service}
PUBLISHED_BY = {
    t.SCORE_REQUESTS: "evaluation",  # evaluator/pipeline/runs.py: a run's requests, at StartRun
    t.SCORES: "eval-worker",  # evaluator/pipeline/worker.py: each score, before its request's offset is committed
}

# user: (topics it produces, including the dead letters its consumers write; topics it consumes; its groups)
EXPECTED: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "cheems-ingestion": (RELAYED["ingestion"], (), ()),
    "cheems-annotation": ((*RELAYED["annotation"], dead_letter(t.SAMPLES)), (t.SAMPLES,), (INTAKE_GROUP,)),
    "cheems-evaluation": (
        (t.SCORE_REQUESTS, dead_letter(t.MODELS), dead_letter(t.EVAL_RESULTS)),
        (t.MODELS, t.EVAL_RESULTS),
        (MODEL_EVALUATOR_GROUP, GATE_GROUP),
    ),
    "cheems-eval-worker": ((t.SCORES, dead_letter(t.SCORE_REQUESTS)), (t.SCORE_REQUESTS,), (WORKER_GROUP,)),
    "cheems-eval-sink": ((*RELAYED["eval-sink"], dead_letter(t.SCORES)), (t.SCORES,), (SINK_GROUP,)),
    "cheems-training": ((*RELAYED["training"], dead_letter(t.RANKINGS)), (t.RANKINGS,), (TRAINING_GROUP,)),
    "cheems-scorer": ((), (t.MODELS,), ()),  # every partition assigned, no group: no group ACL
}


def acls_of(user: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(resource type, name, operation) of every rule, after checking each is a literal allow."""
    found = set()
    for acl in user["spec"]["authorization"]["acls"]:
        resource = acl["resource"]
        assert resource.get("patternType", "literal") == "literal" and resource.get("name", "*") != "*", acl
        assert acl.get("type", "allow") == "allow" and acl.get("host", "*") == "*", acl
        found |= {(resource["type"], resource["name"], op) for op in acl["operations"]}
    return found


def expected_acls(
    produces: tuple[str, ...], consumes: tuple[str, ...], groups: tuple[str, ...]
) -> set[tuple[str, str, str]]:
    return (
        {("topic", name, op) for name in produces for op in WRITE}
        | {("topic", name, op) for name in consumes for op in READ}
        | {("group", name, "Read") for name in groups}
    )


@pytest.mark.parametrize("path", ["kafka", "overlays/prod", "overlays/dev"])
def test_each_user_may_do_its_job_and_nothing_more(path: str) -> None:
    users = by_kind(render(path), "KafkaUser")
    assert set(users) == set(EXPECTED)
    for name, user in users.items():
        assert user["spec"]["authentication"] == {"type": "scram-sha-512"}, name
        assert user["spec"]["authorization"]["type"] == "simple", name
        assert acls_of(user) == expected_acls(*EXPECTED[name]), name


def test_the_acls_name_real_topics_and_every_group_has_its_user() -> None:
    prod = render("overlays/prod")
    existing = {d["spec"]["topicName"] for d in by_kind(prod, "KafkaTopic").values()}
    acls = {a for user in by_kind(prod, "KafkaUser").values() for a in acls_of(user)}
    assert {name for kind, name, _ in acls if kind == "topic"} <= existing
    assert {kind for kind, _, _ in acls} == {"topic", "group"}  # nothing on the cluster or transactional ids
    groups = {INTAKE_GROUP, MODEL_EVALUATOR_GROUP, GATE_GROUP, WORKER_GROUP, SINK_GROUP, TRAINING_GROUP}
    assert {name for kind, name, _ in acls if kind == "group"} == groups
    consumed = {name for kind, name, op in acls if kind == "topic" and op == "Read"}
    assert consumed == {t.SAMPLES, t.MODELS, t.EVAL_RESULTS, t.SCORE_REQUESTS, t.SCORES, t.RANKINGS}


def producers(users: dict[str, dict[str, Any]]) -> list[str]:
    """What breaks "one producer per topic" (empty: nothing): a topic written by two users, a topic's writer that is
    not the service whose code produces it (RELAYED_BY, PUBLISHED_BY), a dead letter written by another user than
    the one consumer group of its topic (a consumer without a group, the scorer's, copies nothing there), or a
    topic of the code that nobody may write."""
    rules = {name: acls_of(user) for name, user in users.items()}
    writers: dict[str, set[str]] = {}
    for name, acls in rules.items():
        for kind, topic, op in acls:
            if kind == "topic" and op == "Write":
                writers.setdefault(topic, set()).add(name)
    owner = {topic: f"cheems-{service}" for service, topics in RELAYED.items() for topic in topics}
    owner |= {topic: f"cheems-{service}" for topic, service in PUBLISHED_BY.items()}
    for topic in t.ALL:  # a dead letter's writer: the user reading the topic in a consumer group
        grouped = {
            n for n, acls in rules.items() if ("topic", topic, "Read") in acls and any(k == "group" for k, *_ in acls)
        }
        if len(grouped) == 1:
            owner[dead_letter(topic)] = grouped.pop()
    problems = [f"{topic}: written by {sorted(names)}" for topic, names in writers.items() if len(names) != 1]
    problems += [f"{topic}: written by {sorted(names)}, produced by {owner.get(topic)}"
                 for topic, names in writers.items() if len(names) == 1 and names != {owner.get(topic)}]  # fmt: skip
    problems += [f"{topic}: nobody may write it" for topic in t.ALL if topic not in writers]
    return sorted(problems)


@pytest.mark.parametrize("path", ["kafka", "overlays/prod", "overlays/dev"])
def test_every_topic_has_one_producer_the_code_names(path: str) -> None:
    """The annotation service alone writes annotations and rankings: the AI judge submits through it over gRPC and
    has no Kafka user; each dead-letter topic is written by its topic's one consumer group."""
    users = by_kind(render(path), "KafkaUser")
    assert producers(users) == []
    assert set(PUBLISHED_BY) | {topic for topics in RELAYED.values() for topic in topics} == set(t.ALL)


def test_a_second_producer_is_caught() -> None:
    """Write on annotations for another user (as the judge's user had), or on a dead letter for the wrong user."""
    users = by_kind(render("kafka"), "KafkaUser")
    for name, topic in (("cheems-training", t.ANNOTATIONS), ("cheems-scorer", dead_letter(t.MODELS))):
        user = users[name]
        rule = {"resource": {"type": "topic", "name": topic, "patternType": "literal"}, "operations": ["Write"]}
        acls = [*user["spec"]["authorization"]["acls"], rule]
        widened = {**user, "spec": {**user["spec"], "authorization": {"type": "simple", "acls": acls}}}
        assert producers({**users, name: widened}) != [], (name, topic)


def test_a_wider_grant_is_caught() -> None:
    """A wildcard, a prefix or one more operation than the job needs fails the checks above."""
    user = by_kind(render("kafka"), "KafkaUser")["cheems-ingestion"]
    acl = user["spec"]["authorization"]["acls"][0]
    wider = [
        {**acl, "resource": {**acl["resource"], "name": "*"}},
        {**acl, "resource": {**acl["resource"], "patternType": "prefix", "name": "cheems."}},
        {**acl, "operations": [*acl["operations"], "Read"]},
    ]
    for rule in wider:
        widened = {**user, "spec": {**user["spec"], "authorization": {"type": "simple", "acls": [rule]}}}
        with pytest.raises(AssertionError):
            assert acls_of(widened) == expected_acls(*EXPECTED["cheems-ingestion"])


@pytest.mark.parametrize("path", ["overlays/prod", "overlays/dev"])
def test_every_kafka_client_connects_as_its_own_user(path: str) -> None:
    """A pod that is given the bootstrap (cheems-config) mounts its user's password file and the cluster CA."""
    docs = render(path)
    users = by_kind(docs, "KafkaUser")
    [ca] = [f"{name}-cluster-ca-cert" for name in by_kind(docs, "Kafka")]
    clients = set()
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        for where, pod in pod_specs(doc):
            [container] = [c for c in containers(pod) if c["name"] == "cheems"]
            configs = [s["configMapRef"]["name"] for s in container.get("envFrom", []) if "configMapRef" in s]
            if not any(name.startswith("cheems-config") for name in configs):
                continue
            name = doc["metadata"]["name"]
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            assert env["CHEEMS_KAFKA_USERNAME"] == name and name in users, where
            volumes = {v["name"]: v.get("secret", {}) for v in pod["volumes"]}
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            password = volumes[mounts[env["CHEEMS_KAFKA_PASSWORD_FILE"].rsplit("/", 1)[0]]]
            assert password["secretName"] == name and password["items"] == [{"key": "password", "path": "password"}]
            assert volumes[mounts["/var/run/secrets/kafka/ca"]]["secretName"] == ca, where
            assert not [e for e in container.get("env", []) if "PASSWORD" in e["name"] and "valueFrom" in e], where
            clients.add(name)
    assert clients == set(users)  # and no user without its client
