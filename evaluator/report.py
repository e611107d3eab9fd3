"""Turn an EvalResult into what people and tools read: the JSON contract, tables and a report folder.

JSON (`cheems eval --json OUT.json`), stable for other tools:
    {"semantics": "paper"|"official", "overall": f,
     "subsets": {"<stem>": {"accuracy": f, "exact_match": f, "ece": f, "prompts": n, "pairs": n,
                            "per_category": {"<category>": {"accuracy": f|null, "exact_match": f, ...}}}}}
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evaluator.metrics import CategoryMetrics, EvalResult, Semantics, SubsetMetrics
from evaluator.table import render_markdown, render_text

SEMANTICS_NOTE = {
    Semantics.PAPER: "a reward tie counts as wrong in accuracy and exact match (paper eqs. 1-2)",
    Semantics.OFFICIAL: "a reward tie counts as wrong in accuracy only (official code)",
}


def to_json(result: EvalResult) -> dict[str, Any]:
    return {
        "semantics": result.semantics.value,
        "overall": result.overall,
        "subsets": {name: asdict(metrics) for name, metrics in result.subsets.items()},
    }


def from_json(data: dict[str, Any]) -> EvalResult:
    """The inverse of `to_json` (e.g. a result stored as JSON by the streaming evaluator)."""
    subsets = {
        name: SubsetMetrics(
            **{k: v for k, v in subset.items() if k != "per_category"},
            per_category={c: CategoryMetrics(**m) for c, m in subset["per_category"].items()},
        )
        for name, subset in data["subsets"].items()
    }
    return EvalResult(Semantics(data["semantics"]), data["overall"], subsets)


def write_json(result: EvalResult, path: str | Path) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(to_json(result), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def summary_rows(result: EvalResult) -> tuple[list[str], list[list[str]]]:
    header = ["Subset", "Prompts", "Pairs", "Acc.", "Exact.", "(Acc.+Exact.)/2", "ECE"]
    rows = [
        [
            name,
            str(s.prompts),
            str(s.pairs),
            _fmt(s.accuracy),
            _fmt(s.exact_match),
            _fmt((s.accuracy + s.exact_match) / 2),
            _fmt(s.ece),
        ]
        for name, s in result.subsets.items()
    ]
    rows.append(["Overall", "", "", "", "", _fmt(result.overall), ""])
    return header, rows


def category_rows(result: EvalResult) -> tuple[list[str], list[list[str]]]:
    """One row per first-level category, Acc./Exact. columns per subset ('-' where absent)."""
    names = list(result.subsets)
    header = ["Category"] + [f"{n} {m}" for n in names for m in ("Acc.", "Exact.")]
    categories = sorted({c for s in result.subsets.values() for c in s.per_category})
    rows = []
    for category in categories:
        row = [category]
        for name in names:
            metrics = result.subsets[name].per_category.get(category)
            row += ["-", "-"] if metrics is None else [_fmt(metrics.accuracy), _fmt(metrics.exact_match)]
        rows.append(row)
    return header, rows


def format_table(result: EvalResult) -> str:
    """What `cheems eval` prints: the subset table with Overall, then per-category figures."""
    return "\n".join(
        [
            f"CheemsBench ({result.semantics.value} semantics: {SEMANTICS_NOTE[result.semantics]})",
            "",
            render_text(*summary_rows(result)),
            "",
            "Per category",
            render_text(*category_rows(result)),
        ]
    )


def format_markdown(result: EvalResult, chart_name: str | None = None) -> str:
    parts = [
        "# CheemsBench results",
        "",
        f"Semantics: **{result.semantics.value}**: {SEMANTICS_NOTE[result.semantics]}.",
        "",
        f"**Overall: {result.overall:.4f}** (mean over subsets of (accuracy + exact match) / 2)",
        "",
        render_markdown(*summary_rows(result)),
        "",
        "## Per category",
        "",
        render_markdown(*category_rows(result)),
    ]
    if chart_name:
        parts += ["", f"![Per-category accuracy]({chart_name})"]
    return "\n".join(parts) + "\n"


def write_report(result: EvalResult, directory: str | Path) -> list[Path]:
    """results.json, per_category.png and README.md in `directory`; returns the paths written."""
    from evaluator.chart import plot_per_category  # matplotlib is slow to import: only when asked

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "results.json", out / "per_category.png", out / "README.md"]
    write_json(result, paths[0])
    plot_per_category(result, paths[1])
    paths[2].write_text(format_markdown(result, paths[1].name), encoding="utf-8")
    return paths
