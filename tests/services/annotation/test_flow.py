"""The annotation flow from the CLI: simulated humans and AI -> resolve -> RM -> distant supervision -> export.

Humans annotate the `open` sample (triple-wise), an AI judge annotates the `human` sample (pairwise,
noisy, length-biased); an RM trained on the resolved human data filters the AI verdicts. The result
must agree with the gold ranks better than the unfiltered AI verdicts do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cheems.formats.cheemsbench import read_bench
from cheems_cli.main import app
from trainer.data import read_groups

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"


def cheems(*args: object) -> str:
    """`cheems ARGS` run in this process (the same commands, without a Python start and a torch import each)."""
    result = CliRunner().invoke(app, list(map(str, args)))
    assert result.exit_code == 0, (result.output[-3000:], result.exception)
    return result.stdout


def gold_agreement(bench: Path) -> float:
    """Share of ranked pairs in `bench` ordered as the sample's gold ranks order them."""
    gold = {i.input: dict(i.rank) for i in read_bench(SAMPLE / "human.jsonl")}
    agree = total = 0
    for item in read_bench(bench):
        for a in item.rank:
            for b in item.rank:
                if item.rank[a] < item.rank[b]:
                    total += 1
                    agree += gold[item.input][a] < gold[item.input][b]
    return agree / total


def test_cli_flow_builds_a_consistent_bench_and_a_training_file(tmp_path: Path) -> None:
    t = tmp_path
    cheems(
        "annotate",
        "simulate",
        SAMPLE / "open.jsonl",
        "--out",
        t / "human_raw.jsonl",
        "--kind",
        "human",
        "--noise",
        "0.1",
    )
    out = cheems("resolve", t / "human_raw.jsonl", "--out", t / "human_bench.jsonl", "--stats", t / "stats.json")
    stats = json.loads((t / "stats.json").read_text())
    assert stats["prompts"] == 18 and stats["annotations"] > 18 and 0 <= stats["conflict_ratio"] < 0.5
    assert "conflict_ratio" in out
    cheems("init-model", "--out", t / "tiny", "--hidden-size", "32")
    cheems(
        "train",
        "--set",
        f"model={t / 'tiny'}",
        "--set",
        f"train_files={t / 'human_bench.jsonl'}",
        "--set",
        "eval_files=[]",
        "--set",
        f"out_dir={t / 'rm'}",
        "--set",
        "epochs=8",
        "--set",
        "progress=false",
    )
    cheems("rewards", SAMPLE / "human.jsonl", "--model", t / "rm" / "model", "--out", t / "rewards.jsonl")
    cheems(
        "annotate", "simulate", SAMPLE / "human.jsonl", "--out", t / "ai_raw.jsonl", "--kind", "ai", "--noise", "0.3"
    )
    cheems("resolve", t / "ai_raw.jsonl", "--out", t / "ai_unfiltered.jsonl")
    report = json.loads(
        cheems(
            "annotate",
            "distant",
            t / "ai_raw.jsonl",
            "--rewards",
            t / "rewards.jsonl",
            "--out",
            t / "ai_bench.jsonl",
            "--margin",
            "0.0",
        )
    )
    assert report["edges_dropped"] > 0 and report["conflicts_after"] < 0.1 * report["edges_kept"]
    assert gold_agreement(t / "ai_bench.jsonl") > gold_agreement(t / "ai_unfiltered.jsonl")
    export = json.loads(
        cheems(
            "annotate",
            "export",
            t / "ai_bench.jsonl",
            "--human",
            t / "human_bench.jsonl",
            "--out",
            t / "preference.jsonl",
        )
    )
    assert export["pairs_after"] <= export["pairs_before"] and export["prompts"] > 20
    groups = read_groups(t / "preference.jsonl")
    assert sum(len(g.pairs) for g in groups) == export["pairs_after"]
