"""Reading a live `/metrics` as Prometheus does: parsed by prometheus_client's own parser, checked by promtool."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[str, Any]:
    """{family name: Metric} of the exposition at `url` (GET over HTTP)."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        return parse(reply.read().decode())


def parse(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample_value(families: Mapping[str, Any], sample: str, labels: Mapping[str, str]) -> float:
    """The value of the sample named `sample` whose labels include `labels` (0 when there is none: a counter not
    incremented yet is absent)."""
    for family in families.values():
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def series(families: Mapping[str, Any], sample: str) -> list[dict[str, str]]:
    """The label sets of every sample named `sample`."""
    return [dict(s.labels) for f in families.values() for s in f.samples if s.name == sample]


def promtool_problems(text: str) -> str:
    """What `promtool check metrics` says of the exposition `text` ("" when it finds nothing)."""
    run = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    return (run.stdout + run.stderr).strip() if run.returncode else ""
