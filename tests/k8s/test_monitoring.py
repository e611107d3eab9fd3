"""The monitoring component (k8s/components/monitoring) as rendered in the overlays that include it: every Cheems
process scraped once on its metrics port, which Prometheus' namespace may reach; the Prometheus Operator and
Grafana find the monitors, rules and dashboard; the Kafka cluster exports the broker metrics the rules read; and
the rules and panels name only metrics someone exports. (The objects against the operators' CRDs:
test_custom_resources.py; the rules through promtool: test_alert_rules.py; the names in a real `cheems up`'s scrape:
`monitoring.assert_every_name_scraped`, called by the test module that runs one.)"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from services import hosting
from tests.k8s.crd_schema import crd_schema
from tests.k8s.manifests import by_kind, render
from tests.k8s.monitoring import (
    EXEMPT,
    assert_every_name_scraped,
    dashboard,
    metric_names,
    missing_from_scrape,
    panels,
    wanted_names,
)

MONITORED = ["overlays/prod", "overlays/gpu-vllm"]
RELEASE = {"release": "kube-prometheus-stack"}  # what the stack's Prometheus selects by default
METRICS_PORT = {  # Deployment -> the port its /metrics is on (services/hosting.py)
    "cheems-scorer": hosting.SCORER_HTTP_PORT,
    "cheems-ingestion": hosting.INGESTION_METRICS_PORT,
    "cheems-annotation": hosting.ANNOTATION_HTTP_PORT,
    "cheems-evaluation": hosting.EVALUATION_HTTP_PORT,
    "cheems-training": hosting.TRAINING_METRICS_PORT,
    "cheems-eval-worker": hosting.EVAL_WORKER_METRICS_PORT,
    "cheems-eval-sink": hosting.EVAL_SINK_METRICS_PORT,
    "cheems-judge": hosting.JUDGE_METRICS_PORT,
}
# The names the services export (the helpers' agreed interface); a rule or panel naming anything else is a typo
# unless EXEMPT says who exports it.
EXPORTED = {
    "grpc_server_handled_total", "grpc_server_handling_seconds_bucket",  # every gRPC server
    "process_resident_memory_bytes", "process_cpu_seconds_total",  # every process
    "cheems_bus_consumer_lag", "cheems_bus_dead_letters_total", "cheems_ingest_records_total",
    "cheems_annotation_tasks", "cheems_annotations_total", "cheems_trainings", "cheems_training_relaunches_total",
    "cheems_eval_items_scored_total", "cheems_eval_runs", "cheems_models", "cheems_up_restarts_total",
    "cheems_scorer_requests_total", "cheems_scorer_request_duration_seconds_bucket", "cheems_scorer_in_flight",
    "cheems_scorer_reward_bucket", "cheems_scorer_reward_count", "cheems_scorer_reward_mean",
    "cheems_scorer_reward_std", "cheems_scorer_reward_length_correlation", "cheems_scorer_reward_bench_mean",
    "cheems_scorer_reward_bench_std",
}  # fmt: skip


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def scraped_ports(docs: tuple[dict[str, Any], ...], name: str, pod: dict[str, Any]) -> list[int]:
    """The container ports Prometheus scrapes on Deployment `name`'s pods, one entry per monitor endpoint."""
    labels = pod["metadata"]["labels"]
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    found = []
    for monitor in by_kind(docs, "PodMonitor").values():
        if matches(monitor["spec"]["selector"], labels):
            found += [ports[e["port"]] for e in monitor["spec"]["podMetricsEndpoints"]]
    for monitor in by_kind(docs, "ServiceMonitor").values():
        for service in by_kind(docs, "Service").values():
            if matches(monitor["spec"]["selector"], service["metadata"]["labels"]) and all(
                labels.get(k) == v for k, v in service["spec"]["selector"].items()
            ):
                by_name = {p["name"]: p for p in service["spec"]["ports"]}
                found += [
                    ports[by_name[e["port"]]["targetPort"]]
                    for e in monitor["spec"]["endpoints"]
                    if e["port"] in by_name
                ]
    return found


@pytest.mark.parametrize("path", MONITORED)
def test_every_process_is_scraped_once_on_its_metrics_port(path: str) -> None:
    docs = render(path)
    deployments = by_kind(docs, "Deployment")
    assert set(deployments) == set(METRICS_PORT), "a Deployment the monitoring does not know"
    for name, deployment in deployments.items():
        ports = scraped_ports(docs, name, deployment["spec"]["template"])
        assert ports == [METRICS_PORT[name]], f"k8s/{path}: {name} is scraped on {ports}"


@pytest.mark.parametrize("path", MONITORED)
def test_each_service_monitor_reaches_one_service_port(path: str) -> None:
    """The scorer's label also selects its headless Service: the endpoint's port name must single out one."""
    docs = render(path)
    services = by_kind(docs, "Service").values()
    for name, monitor in by_kind(docs, "ServiceMonitor").items():
        for endpoint in monitor["spec"]["endpoints"]:
            having = [
                s["metadata"]["name"]
                for s in services
                if matches(monitor["spec"]["selector"], s["metadata"]["labels"])
                and endpoint["port"] in {p["name"] for p in s["spec"]["ports"]}
            ]
            assert len(having) == 1, f"k8s/{path}: ServiceMonitor {name} port {endpoint['port']}: {having}"


@pytest.mark.parametrize("path", MONITORED)
def test_prometheus_may_reach_every_metrics_port(path: str) -> None:
    docs = render(path)
    policies = by_kind(docs, "NetworkPolicy").values()
    for name, deployment in by_kind(docs, "Deployment").items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        open_to_monitoring = {
            port["port"]
            for policy in policies
            if matches(policy["spec"]["podSelector"], labels)
            for rule in policy["spec"].get("ingress", [])
            if {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in rule["from"]
            for port in rule["ports"]
        }
        assert open_to_monitoring == {METRICS_PORT[name]}, f"k8s/{path}: {name}: {open_to_monitoring}"


@pytest.mark.parametrize("path", MONITORED)
def test_the_operator_and_grafana_find_them(path: str) -> None:
    docs = render(path)
    kinds = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
    found = [d for d in docs if d["kind"] in kinds]
    assert {d["kind"] for d in found} == set(kinds)
    for doc in found:
        assert RELEASE.items() <= doc["metadata"].get("labels", {}).items(), doc["metadata"]["name"]
        job_label = doc["spec"].get("jobLabel")
        assert doc["kind"] == "PrometheusRule" or job_label in ("app.kubernetes.io/name", "strimzi.io/name")
    [board] = [d for d in by_kind(docs, "ConfigMap").values() if "grafana_dashboard" in d["metadata"].get("labels", {})]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert yaml.safe_load(board["data"]["cheems.json"]) == dashboard()


def test_dev_renders_without_the_operators_kinds() -> None:
    """Dev clusters often lack the Prometheus Operator: the component is opt-in there (its kustomization says how)."""
    assert not [d for d in render("overlays/dev") if d["apiVersion"].startswith("monitoring.coreos.com/")]


def test_the_schemas_refuse_broken_monitors() -> None:
    docs = render("overlays/prod")
    service_monitor = by_kind(docs, "ServiceMonitor")["cheems-scorer"]
    pod_monitor = by_kind(docs, "PodMonitor")["cheems-eval-worker"]
    rule = next(iter(by_kind(docs, "PrometheusRule").values()))
    group = rule["spec"]["groups"][0]
    bad = [
        {**service_monitor, "spec": {**service_monitor["spec"], "endpoint": service_monitor["spec"]["endpoints"]}},
        {**service_monitor, "spec": {"endpoints": service_monitor["spec"]["endpoints"]}},  # no selector
        {
            **pod_monitor,
            "spec": {**pod_monitor["spec"], "podMetricsEndpoints": [{"port": 9054}]},
        },  # a name, not a number
        {**rule, "spec": {"groups": [{**group, "rules": [{"alert": "X", "expression": "up == 0"}]}]}},
        {**rule, "spec": {"groups": [{**group, "partial_response_strategy": "ignore"}]}},
    ]
    for doc in bad:
        schema = crd_schema(doc["apiVersion"], doc["kind"])
        assert schema is not None
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema)


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    assert board["uid"] == "cheems-overview" and board["title"] == "Cheems"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "namespace"} <= variables
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, f"panel {panel['title']!r} overlaps another"
        taken |= cells
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["refId"] and target["datasource"]["uid"] == "${datasource}", panel["title"]
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used <= variables, f"panel {panel['title']!r} uses {used - variables}"
            assert 'namespace="$namespace"' in target["expr"] or "namespace=" not in target["expr"], panel["title"]


def test_metric_names_of_an_expression() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (job, le) (rate(grpc_server_handling_seconds_bucket{job=~"cheems-.*", '
        'grpc_type="unary"}[5m]))) > 2 and on (job) up offset 15m or absent(cheems_models{stage="x"}) * 1e3'
    )
    assert metric_names(expr) == {"grpc_server_handling_seconds_bucket", "up", "cheems_models"}
    assert metric_names('label_values(process_resident_memory_bytes{job=~"cheems-.*"}, namespace)') == {
        "process_resident_memory_bytes"
    }
    assert metric_names("sum without (pod) (a:recorded:rate5m) / ignoring (x) b") == {"a:recorded:rate5m", "b"}


def test_rules_and_panels_name_only_exported_metrics() -> None:
    names = wanted_names()
    unknown = {n: where for n, where in names.items() if n not in EXPORTED and n not in EXEMPT}
    assert not unknown, f"named by no exporter: {unknown}"
    assert {"cheems_scorer_reward_bench_mean", "cheems_scorer_reward_length_correlation", "cheems_models"} <= set(names)
    assert set(EXEMPT) <= set(names), f"exempt but unused: {set(EXEMPT) - set(names)}"


def jmx_names(config: dict[str, Any]) -> set[str]:
    """The names the JMX exporter's rules produce (`$1` expanded over the pattern's alternatives, lower case)."""
    names = set()
    for rule in config["rules"]:
        group = re.search(r"\(([\w|]+)\)", rule["pattern"])
        choices = group.group(1).split("|") if group and "$1" in rule["name"] else [""]
        names |= {rule["name"].replace("$1", c).lower() for c in choices}
    return names


@pytest.mark.parametrize("path", MONITORED)
def test_the_kafka_cluster_exports_what_the_rules_read(path: str) -> None:
    docs = render(path)
    [kafka] = by_kind(docs, "Kafka").values()
    ref = kafka["spec"]["kafka"]["metricsConfig"]["valueFrom"]["configMapKeyRef"]
    config = yaml.safe_load(by_kind(docs, "ConfigMap")[ref["name"]]["data"][ref["key"]])
    assert config["lowercaseOutputName"] is True
    from_brokers = {n for n in wanted_names() if n.startswith(("kafka_server_", "kafka_controller_"))}
    assert from_brokers and from_brokers <= jmx_names(config), from_brokers - jmx_names(config)
    assert "kafkaExporter" in kafka["spec"]
    cluster = kafka["metadata"]["name"]
    selectors = [m["spec"]["selector"]["matchLabels"] for m in by_kind(docs, "PodMonitor").values()]
    selected = {s.get("strimzi.io/name") for s in selectors if s.get("strimzi.io/cluster") == cluster}
    assert selected == {f"{cluster}-kafka", f"{cluster}-kafka-exporter"}


def test_a_live_scrape_shows_the_names_no_process_exports() -> None:
    """Over real HTTP: a histogram and a labelled counter nothing has moved yet count as exported (their families
    are declared), a name nobody exports is missing, and exempt names are never looked for."""
    registry = CollectorRegistry()
    Histogram("grpc_server_handling_seconds", "x", ["grpc_method"], registry=registry)
    Counter("cheems_bus_dead_letters", "x", ["topic", "group"], registry=registry)
    Gauge("cheems_models", "x", ["stage"], registry=registry).labels("production").set(1)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        wanted = ["grpc_server_handling_seconds_bucket", "cheems_bus_dead_letters_total", "cheems_models",
                  "cheems_scorer_reward_mean", "kube_pod_container_status_restarts_total"]  # fmt: skip
        assert missing_from_scrape([url], wanted) == ["cheems_scorer_reward_mean"]
        with pytest.raises(AssertionError, match="cheems_scorer_reward_mean: rule CheemsRewardDrift"):
            assert_every_name_scraped({"scorer": url})
    finally:
        server.shutdown()
        thread.join(10)
