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


# families a scorer re-exports from its engines under their own names (Triton's `nv_inference_*_us`, its
# `nv_inference_pending_request_count` gauge, vLLM's `vllm:*`): their own dashboards know those names, so they are
# passed on as the engines write them, and promtool's naming lint of them is theirs, not ours
ENGINE_FAMILIES = ("nv_", "vllm:")


def promtool_problems(text: str, foreign: tuple[str, ...] = ENGINE_FAMILIES) -> str:
    """What `promtool check metrics` says of the exposition `text` ("" when it finds nothing), less its naming lint
    of the families named by `foreign` prefixes (an exposition it cannot parse is always reported)."""
    run = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    if not run.returncode:
        return ""
    lines = (run.stdout + run.stderr).strip().splitlines()
    return "\n".join(line for line in lines if not line.startswith(foreign)).strip()
