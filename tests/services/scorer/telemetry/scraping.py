"""Reading a live /metrics: the text over HTTP, a sample's value parsed with prometheus_client, promtool's check."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def scrape(http_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as reply:
        return str(reply.read().decode())


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when there is none)."""
    return sum(s.value for s in samples(text) if s.name == name and labels.items() <= s.labels.items())


def labelled(text: str, name: str, **labels: str) -> list[Sample]:
    return [s for s in samples(text) if s.name == name and labels.items() <= s.labels.items()]


def family_names(text: str) -> set[str]:
    return {family.name for family in text_string_to_metric_families(text)}


ENGINES = ("nv_", "vllm:")  # the engines' own names, re-exported as they are


def promtool_check(text: str) -> None:
    """`promtool check metrics` on the exposition: it must parse, and pass its lint but for the names of the
    engines' families (vLLM's have a colon, Triton's say `_us`: theirs to choose, and dashboards know them)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: `make promtool` (Debian's prometheus package) installs it")
    done = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    said = (done.stdout + done.stderr).decode().splitlines()
    problems = [line for line in said if line.strip() and not line.startswith(ENGINES)]
    assert not problems, "\n".join(said)
    assert done.returncode == 0 or said, "promtool failed without saying why"
