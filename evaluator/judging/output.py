"""What `cheems eval --judge-url` prints and writes: the bench tables plus the judge's verdict counts.

JSON (`--json OUT`, and results.json of `--report DIR`): the reward-model layout (`evaluator.report.to_json`,
ECE null) with one more key:
    "judge": {"model": str, "orders": "both", "pairs": n, "calls": 2n,
              "outcomes": {"right": n, "wrong": n, "tie": n, "inconsistent": n, "unparseable": n},
              "per_subset": {"<stem>": {<the same five counts>}}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evaluator.judging.outcomes import Outcome
from evaluator.judging.run import JudgeEvaluation
from evaluator.metrics import Semantics
from evaluator.report import category_rows, summary_rows, to_json, write_report
from evaluator.table import render_markdown, render_text

RULE = {
    Semantics.PAPER: "a pair is right when both orders prefer the human-better response; "
    "an inconsistent verdict or a tie is wrong in accuracy and exact match",
    Semantics.OFFICIAL: "a pair is right when both orders prefer the human-better response; "
    "an inconsistent verdict or a tie is wrong in accuracy but keeps exact match",
}


def totals(evaluation: JudgeEvaluation) -> dict[str, int]:
    return {o.value: sum(c[o.value] for c in evaluation.outcomes.values()) for o in Outcome}


def judge_json(evaluation: JudgeEvaluation, model: str) -> dict[str, Any]:
    return {
        **to_json(evaluation.result),
        "judge": {
            "model": model,
            "orders": "both",
            "pairs": evaluation.pairs,
            "calls": 2 * evaluation.pairs,
            "outcomes": totals(evaluation),
            "per_subset": {name: dict(counts) for name, counts in evaluation.outcomes.items()},
        },
    }


def outcome_rows(evaluation: JudgeEvaluation) -> tuple[list[str], list[list[str]]]:
    header = ["Subset", "Pairs", *(o.value.capitalize() for o in Outcome)]
    rows = [
        [name, str(sum(counts.values())), *(str(counts[o.value]) for o in Outcome)]
        for name, counts in [*evaluation.outcomes.items(), ("All", totals(evaluation))]
    ]
    return header, rows


def format_judge_table(evaluation: JudgeEvaluation, model: str) -> str:
    semantics = evaluation.result.semantics
    return "\n".join(
        [
            f"Generative judge {model} ({semantics.value} semantics: {RULE[semantics]})",
            "",
            render_text(*summary_rows(evaluation.result)),
            "",
            "Per category",
            render_text(*category_rows(evaluation.result)),
            "",
            "Verdicts (each pair asked twice, each response shown first once)",
            render_text(*outcome_rows(evaluation)),
        ]
    )


def write_judge_json(evaluation: JudgeEvaluation, model: str, path: str | Path) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(judge_json(evaluation, model), ensure_ascii=False, indent=2) + "\n"
    target.write_text(text, encoding="utf-8")


def write_judge_report(evaluation: JudgeEvaluation, model: str, directory: str | Path) -> list[Path]:
    """The reward-model report (results.json, per_category.png, README.md) with the judge's counts added."""
    paths = write_report(evaluation.result, directory)
    write_judge_json(evaluation, model, paths[0])
    readme = paths[2].read_text(encoding="utf-8")
    readme = readme.replace("# CheemsBench results", f"# CheemsBench results: generative judge {model}", 1)
    extra = f"\n## Verdicts\n\n{RULE[evaluation.result.semantics]}.\n\n{render_markdown(*outcome_rows(evaluation))}\n"
    paths[2].write_text(readme + extra, encoding="utf-8")
    return paths
