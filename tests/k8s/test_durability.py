"""The manifests keep the durability promises with the real parts (issue 41; README, "What survives what").

Every long-running pod is probed on a port its container exposes; every pod says its grace period, and a Cheems
service's covers what its process does on SIGTERM, added up from the code's own defaults (`shutdown_budget`); the
Kafka cluster and every topic keep an acknowledged event on two brokers at least and never elect a leader that may
miss one; the producers ask for exactly that (acks=all, idempotent), read from a real KafkaProducer made by the
code's `Publisher` without a broker.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from services.annotation.intake import IntakeLoop
from services.annotation.judge.worker import JudgeWorkerConfig
from services.bus.client import CONSUMER_TIMEOUTS, Publisher
from services.hosting import HostConfig
from services.scorer.config import ScorerConfig
from tests.k8s.manifests import APP_OVERLAYS, KUSTOMIZATIONS, by_kind, is_cheems, pod_specs, render
from tests.k8s.test_consistency import resolve
from tests.k8s.test_gpu_vllm import ENGINE_STOP_SECONDS
from trainer.service.monitor import Monitor

# Waits of the scorer's stop that are literals in the code, not settings (services/scorer/runtime.py
# `ScorerServer.stop`: the HTTP server's thread joined for 10 s; services/scorer/triton/shared.py: tritonserver's
# `exit_timeout_secs=5`; the vLLM engine's: tests/k8s/test_gpu_vllm.py).
HTTP_STOP_S = 10.0
BACKEND_STOP_S = {"triton": 5.0, "vllm": float(ENGINE_STOP_SECONDS), "torch": 0.0}
CLUSTER_OVERLAYS = ["kafka", "overlays/prod", "overlays/gpu-vllm"]  # three brokers (dev runs one)


def default(cls: Any, name: str) -> Any:
    """The default of a dataclass field or of a pydantic model field."""
    if dataclasses.is_dataclass(cls):
        return next(f.default for f in dataclasses.fields(cls) if f.name == name)
    return cls.model_fields[name].default


def argument_default(function: Any, name: str) -> Any:
    return inspect.signature(function).parameters[name].default


def relay() -> tuple[Any, Any]:
    """(EventRelay, RelayConfig): the annotation service's today; issue 41 moves them to services.bus.relay."""
    for name in ("services.bus.relay", "services.annotation.events"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "EventRelay"):
            return module.EventRelay, module.RelayConfig
    raise AssertionError("no EventRelay in services.bus.relay or services.annotation.events")


def shutdown_budget(command: tuple[str, ...], cli: Any, values: dict[str, Any], container: dict[str, Any]) -> float:
    """Seconds `cheems COMMAND` may take from SIGTERM to exit when nothing hangs, from the code's defaults.

    drain: gRPC calls in flight finish (`HostConfig.drain_seconds`); batch: a consumer's polled batch is handled and
    committed (the group's own bound on it, `max_poll_interval_ms`); relay: the outbox relay's thread ends its batch
    (joined for `EventRelay.stop`'s timeout), then one more try (`RelayConfig.ack_timeout`); flush: the producer's
    close sends what is pending (the same acknowledgement budget).
    """
    event_relay, relay_config = relay()
    drain = float(default(HostConfig, "drain_seconds"))
    batch = CONSUMER_TIMEOUTS["max_poll_interval_ms"] / 1000
    flush = float(relay_config().ack_timeout)
    outbox = float(argument_default(event_relay.stop, "timeout")) + flush
    option = {p.name: p.default for p in cli.params} | {k: v for k, v in values.items() if v is not None}
    if command == ("serve",):
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        backend = option.get("backend") or default(ScorerConfig, "backend")
        scorer_drain = float(option.get("drain_seconds") or default(ScorerConfig, "drain_seconds"))
        return pre_stop + scorer_drain + HTTP_STOP_S + BACKEND_STOP_S[backend]
    budgets: dict[tuple[str, ...], Callable[[], float]] = {
        ("service", "ingestion"): lambda: drain + outbox + flush,  # its samples' outbox relay (issue 41)
        ("service", "annotation"): lambda: drain + float(argument_default(IntakeLoop.join, "timeout")) + outbox + flush,
        # a pair under way: its check that it is open, the judge's call, its verdict (two calls to annotation)
        ("service", "judge"): lambda: float(option["timeout"]) + 2 * float(default(JudgeWorkerConfig, "timeout")),
        ("service", "evaluation"): lambda: drain + batch + flush,
        ("service", "eval-worker"): lambda: batch + flush,
        ("service", "eval-sink"): lambda: batch + flush,
        ("service", "training"): lambda: drain + float(argument_default(Monitor.close, "timeout")) + outbox + flush,
    }
    assert command in budgets, f"`cheems {' '.join(command)}`: what does it do on SIGTERM? (add it here)"
    return budgets[command]()


def long_running(path: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of every Deployment and StatefulSet `path` renders."""
    return [w for d in render(path) if d["kind"] in ("Deployment", "StatefulSet") for w in pod_specs(d)]


def probed_port(probe: dict[str, Any]) -> int | str | None:
    """The port a probe connects to (None for an exec probe, which runs in the container)."""
    for kind in ("grpc", "tcpSocket", "httpGet"):
        if kind in probe:
            return probe[kind]["port"]
    assert "exec" in probe, f"a probe of no known kind: {probe}"
    return None


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_long_running_pods_are_probed_on_ports_they_expose(path: str) -> None:
    for where, pod in long_running(path):
        for container in pod["containers"]:
            at = f"k8s/{path}: {where}: container {container['name']}"
            exposed = {p["containerPort"] for p in container.get("ports", [])}
            exposed |= {p["name"] for p in container.get("ports", []) if "name" in p}
            assert "readinessProbe" in container and "livenessProbe" in container, f"{at}: readiness and liveness"
            for name in ("readinessProbe", "livenessProbe", "startupProbe"):
                if name in container:
                    port = probed_port(container[name])
                    assert port is None or port in exposed, f"{at}: {name} on {port}, the container exposes {exposed}"
            if is_cheems(container):  # gRPC health: "" is readiness, `liveness` liveness (services.hosting)
                assert container["readinessProbe"]["grpc"].get("service", "") == "", f"{at}: readiness service"
                for name in ("livenessProbe", "startupProbe"):
                    if name in container:
                        assert container[name]["grpc"].get("service") == "liveness", f"{at}: {name} service"


@pytest.mark.parametrize("path", KUSTOMIZATIONS)
def test_every_pod_says_its_grace_period(path: str) -> None:
    """Explicit, each with its reason in a comment: Kubernetes' default (30 s) is nobody's decision."""
    for doc in render(path):
        for where, pod in pod_specs(doc):
            assert "terminationGracePeriodSeconds" in pod, f"k8s/{path}: {where}: no terminationGracePeriodSeconds"
        if doc["kind"] == "KafkaNodePool":  # Strimzi makes the brokers' pods from the pool's template
            pod = doc["spec"].get("template", {}).get("pod", {})
            assert pod.get("terminationGracePeriodSeconds", 0) >= 60, f"k8s/{path}: KafkaNodePool: controlled shutdown"


@pytest.mark.parametrize("path", APP_OVERLAYS)
def test_grace_periods_cover_what_each_process_does_on_sigterm(path: str) -> None:
    checked = set()
    for where, pod in long_running(path):
        for container in (c for c in pod["containers"] if is_cheems(c)):
            command, cli, values = resolve(container["args"])
            budget = shutdown_budget(command, cli, values, container)
            grace = pod.get("terminationGracePeriodSeconds", 30)
            took = f"`cheems {' '.join(command)}` takes {budget} s"
            assert grace >= budget, f"k8s/{path}: {where}: grace {grace} s, {took}"
            checked.add(command)
    assert ("serve",) in checked and ("service", "annotation") in checked, checked


def test_the_budget_is_read_from_the_code() -> None:
    """A longer drain or acknowledgement timeout in the code asks for a longer grace period."""
    command, cli, values = resolve(["serve", "--drain-seconds=60"])
    assert shutdown_budget(command, cli, values, {}) == 60 + HTTP_STOP_S + BACKEND_STOP_S["triton"]
    pre_stop = {"lifecycle": {"preStop": {"sleep": {"seconds": 7}}}}
    assert shutdown_budget(command, cli, values, pre_stop) == 67 + HTTP_STOP_S + BACKEND_STOP_S["triton"]
    command, cli, values = resolve(["service", "ingestion"])
    _, relay_config = relay()
    ack = relay_config().ack_timeout
    assert shutdown_budget(command, cli, values, {}) >= default(HostConfig, "drain_seconds") + 2 * ack


def brokers(docs: tuple[dict[str, Any], ...]) -> int:
    return sum(p["spec"]["replicas"] for p in by_kind(docs, "KafkaNodePool").values() if "broker" in p["spec"]["roles"])


@pytest.mark.parametrize("path", CLUSTER_OVERLAYS)
def test_an_acknowledged_event_is_on_two_brokers(path: str) -> None:
    """Replication 3, min.insync.replicas 2 (so acks=all means two copies, and one broker may be away without
    refusing writes), no unclean leader election: for the cluster's defaults, its internal topics and every topic."""
    docs = render(path)
    assert brokers(docs) >= 3, f"k8s/{path}: three brokers"
    (kafka,) = by_kind(docs, "Kafka").values()
    config = kafka["spec"]["kafka"]["config"]
    replicated = ("default.replication.factor", "offsets.topic.replication.factor")
    for key in (*replicated, "transaction.state.log.replication.factor"):
        assert config[key] >= 3, f"k8s/{path}: {key}"
    for key in ("min.insync.replicas", "transaction.state.log.min.isr"):
        assert 2 <= config[key] < config["default.replication.factor"], f"k8s/{path}: {key}"
    assert config["unclean.leader.election.enable"] is False, f"k8s/{path}: said explicitly"
    topics = by_kind(docs, "KafkaTopic")
    assert topics, f"k8s/{path}: no topics"
    for name, topic in topics.items():
        spec = topic["spec"]
        assert spec["replicas"] >= 3, f"k8s/{path}: {name} replicas"
        assert 2 <= int(spec["config"]["min.insync.replicas"]) < spec["replicas"], f"k8s/{path}: {name} min.insync"
        assert spec["config"]["unclean.leader.election.enable"] == "false", f"k8s/{path}: {name} unclean election"


@pytest.mark.parametrize("path", ["overlays/dev", *CLUSTER_OVERLAYS])
def test_topics_fit_their_brokers(path: str) -> None:
    """Dev's one broker holds one copy (its topics say so); everywhere a topic's replicas exist and a write can
    reach min.insync.replicas."""
    docs = render(path)
    for name, topic in by_kind(docs, "KafkaTopic").items():
        spec = topic["spec"]
        assert int(spec["config"]["min.insync.replicas"]) <= spec["replicas"] <= brokers(docs), f"k8s/{path}: {name}"
        assert spec["config"]["unclean.leader.election.enable"] == "false", f"k8s/{path}: {name}"


def test_producers_wait_for_every_in_sync_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    """The KafkaProducer the code's Publisher makes: acks=all, idempotent, retrying. kafka-python connects at
    construction only to probe the broker's version, so giving it one makes the real producer here, offline."""
    import kafka

    made: list[Any] = []

    class Offline(kafka.KafkaProducer):  # type: ignore[misc]
        def __init__(self, **configs: Any) -> None:
            super().__init__(**{"api_version": (3, 0), **configs})
            made.append(self)

    monkeypatch.setattr(kafka, "KafkaProducer", Offline)
    publisher = Publisher("127.0.0.1:9")
    try:
        producer = publisher.producer
        assert made == [producer]
        config = producer.config
        assert config["acks"] in (-1, "all"), "acknowledged once every in-sync replica has it"
        assert config["enable_idempotence"] is True, "a retried send is not written twice"
        assert config["retries"] > 0
        assert config["max_in_flight_requests_per_connection"] <= 5, "idempotence keeps order up to 5 in flight"
    finally:
        publisher.close(timeout=0)
