"""The monitoring component's alert rules and dashboard, read as data: their PromQL expressions, the metric names
those name, and which of the names a live system's /metrics pages show.

    names = wanted_names()                      # {metric name: [where it is used, ...]}
    missing = missing_from_scrape(urls)         # of those, the ones no page in `urls` exports (exemptions aside)

`cheems status --json` of a running `cheems up` gives the URLs (its `metrics` key): `assert_every_name_scraped`
takes them. A name counts as exported when the exposition declares its family (`# TYPE`), samples or not:
a labelled counter nothing has incremented yet (dead letters, relaunches) has no sample, and still exists.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.k8s.manifests import K8S

COMPONENT = K8S / "components" / "monitoring"
RULES = COMPONENT / "rules.yaml"
DASHBOARD = COMPONENT / "dashboards" / "cheems.json"

# Names a Cheems process does not export, each with who does; the live scrape does not look for them.
EXEMPT = {
    "up": "Prometheus itself, per target",
    "kube_pod_container_status_restarts_total": "kube-state-metrics",
    "kafka_consumergroup_lag": "Strimzi's Kafka Exporter (the embedded broker is Tansu)",
    "kafka_server_brokertopicmetrics_messages_in_total": "the Kafka brokers' JMX exporter (kafka-metrics.yaml)",
    "kafka_server_replicamanager_underreplicatedpartitions": "the Kafka brokers' JMX exporter",
    "kafka_controller_kafkacontroller_offlinepartitionscount": "the Kafka brokers' JMX exporter",
}

# PromQL words that are not metric names: operators, modifiers, and the literals a number may be.
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "inf", "nan", "atan2", "start", "end"}  # fmt: skip
STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
NAME = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)\b(?!\s*\()")
LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$")  # Grafana's variable query


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label matchers, ranges, grouping
    clauses, function calls, keywords and numbers are taken out."""
    if match := LABEL_VALUES.match(expr):
        expr = match.group(1)
    text = STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = GROUPING.sub(" ", text)
    return {m.group(1) for m in NAME.finditer(text) if m.group(1).lower() not in KEYWORDS}


@cache
def rule_groups() -> tuple[dict[str, Any], ...]:
    (doc,) = [d for d in yaml.safe_load_all(RULES.read_text()) if d and d["kind"] == "PrometheusRule"]
    return tuple(doc["spec"]["groups"])


def alerts() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


@cache
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(board: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows too (rows themselves left out)."""
    found: list[dict[str, Any]] = []
    for panel in (board or dashboard())["panels"]:
        found += [panel] if panel["type"] != "row" else panel.get("panels", [])
    return found


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every rule, dashboard panel target and dashboard variable query."""
    found = [(f"rule {r.get('alert') or r['record']}", r["expr"]) for g in rule_groups() for r in g["rules"]]
    for panel in panels():
        found += [(f"panel {panel['title']!r}", t["expr"]) for t in panel.get("targets", [])]
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            found.append((f"variable ${variable['name']}", query["query"] if isinstance(query, dict) else query))
    return found


def wanted_names() -> dict[str, list[str]]:
    """Metric name -> where the rules and the dashboard use it."""
    names: dict[str, list[str]] = {}
    for where, expr in expressions():
        for name in metric_names(expr):
            names.setdefault(name, []).append(where)
    return names


def exported_names(exposition: str) -> set[str]:
    """Every series name a Prometheus text exposition declares or holds (a histogram family `x` declares
    x_bucket, x_sum, x_count; a counter `x` declares x_total)."""
    names: set[str] = set()
    suffixes = {
        "counter": ["_total", "_created"],
        "histogram": ["_bucket", "_sum", "_count", "_created"],
        "summary": ["_sum", "_count", "_created"],
        "gaugehistogram": ["_bucket", "_gsum", "_gcount"],
    }
    for family in text_string_to_metric_families(exposition):
        names.add(family.name)
        names.update(family.name + s for s in suffixes.get(family.type, []))
        names.update(sample.name for sample in family.samples)
    return names


def scrape(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: bytes = response.read()
    return body.decode("utf-8")


def missing_from_scrape(urls: Iterable[str], wanted: Iterable[str] | None = None) -> list[str]:
    """The wanted names (default: every rule's and panel's, exemptions aside) that no page at `urls` exports."""
    seen: set[str] = set()
    for url in urls:
        seen |= exported_names(scrape(url))
    names = set(wanted_names()) if wanted is None else set(wanted)
    return sorted(names - seen - set(EXEMPT))


def assert_every_name_scraped(urls: Mapping[str, str]) -> None:
    """For a test holding a running `cheems up`: `urls` is its `cheems status --json` report's `metrics` (process ->
    its /metrics URL); every metric the rules and the dashboard name must be on one of those pages."""
    assert urls, "`cheems status --json` names no metrics URLs"
    missing = missing_from_scrape(str(u) for u in urls.values())
    used = wanted_names()
    assert not missing, "named by rules or panels, exported by no process:\n" + "\n".join(
        f"  {name}: {', '.join(used[name])}" for name in missing
    )


def promtool_rules(folder: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file (what promtool reads), in `folder`."""
    path = folder / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": list(rule_groups())}, sort_keys=False))
    return path
