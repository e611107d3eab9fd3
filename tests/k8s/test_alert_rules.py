"""The alert rules (k8s/components/monitoring/rules.yaml) through Prometheus' own promtool: they load (`check
rules`), and each fires on synthetic series that should fire it and stays silent on look-alikes that should not
(`test rules` on tests/k8s/alert_rules_test.yaml, where promtool compares the complete list of alerts at each
evaluation time, so a look-alike that fired would fail it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s import monitoring
from tests.k8s.monitoring import alerts, metric_names, promtool_rules

CASES = Path(__file__).resolve().parent / "alert_rules_test.yaml"
SERIES = re.compile(r"^\s*([A-Za-z_:][\w:]*)\s*\{(.*)\}\s*$")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: `make setup` installs Debian's prometheus package"
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def run_cases(folder: Path) -> subprocess.CompletedProcess[str]:
    shutil.copy(CASES, folder / CASES.name)
    return promtool("test", "rules", CASES.name, cwd=folder)


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    rules = promtool_rules(tmp_path)
    done = promtool("check", "rules", rules.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in done.stdout


def test_each_alert_fires_when_it_should_and_only_then(tmp_path: Path) -> None:
    promtool_rules(tmp_path)
    done = run_cases(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def labels_of(series: str) -> tuple[str, dict[str, str]]:
    match = SERIES.match(series)
    assert match, f"not a series: {series}"
    return match.group(1), dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', match.group(2)))


def explained(labels: dict[str, str], expected: list[dict[str, Any]]) -> bool:
    """A series some expected alert stands for: every label both carry is equal."""
    return any(all(str(e[k]) == v for k, v in labels.items() if k in e) for e in expected)


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    """Firing: an expected alert. Silent: an evaluation expecting none, or a series of the alert's metrics that no
    expected alert stands for (promtool then proves it does not fire)."""
    cases = yaml.safe_load(CASES.read_text())
    assert cases["rule_files"] == ["rules.yml"]
    fires: set[str] = set()
    silent: set[str] = set()
    for group in cases["tests"]:
        series = [labels_of(s["series"]) for s in group["input_series"]]
        for case in group["alert_rule_test"]:
            name, expected = case["alertname"], [e["exp_labels"] for e in case["exp_alerts"]]
            assert name in alerts(), f"{CASES.name} tests {name}, which rules.yaml has not"
            used = metric_names(alerts()[name]["expr"])
            if expected:
                fires.add(name)
            if not expected or any(m in used and not explained(labels, expected) for m, labels in series):
                silent.add(name)
    assert fires == set(alerts()), f"never seen firing: {set(alerts()) - fires}"
    assert silent == set(alerts()), f"never seen silent: {set(alerts()) - silent}"


@pytest.mark.parametrize(
    "alert, old, new",
    [
        ("CheemsRewardDrift", "and rate(cheems_scorer_reward_count[10m]) > 0", ""),  # rm-d's stale gauges fire
        ("CheemsGrpcErrorRatioHigh", "> 0.05", "> 0.5"),  # 10% and 20% no longer fire
        (
            "CheemsConsumerLagHigh",
            "(max by (namespace, group, topic, partition) (cheems_bus_consumer_lag))",
            "(cheems_bus_consumer_lag)",
        ),  # a partition two replicas report counted twice: 2.3k, not 1.5k
        ("CheemsDeadLetters", "or\n", "unless\n"),  # the counter that appeared at 1 is missed
    ],
)
def test_the_cases_catch_a_broken_rule(tmp_path: Path, alert: str, old: str, new: str) -> None:
    """The promtool cases can fail: each of these edits of a rule makes them fail."""
    rule = alerts()[alert]
    assert old in rule["expr"], f"{alert}: the edit's text is gone from its expression"
    groups = [
        {**g, "rules": [{**r, "expr": r["expr"].replace(old, new)} if r is rule else r for r in g["rules"]]}
        for g in monitoring.rule_groups()
    ]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    done = run_cases(tmp_path)
    assert done.returncode != 0 and f"alertname: {alert}" in done.stdout + done.stderr
