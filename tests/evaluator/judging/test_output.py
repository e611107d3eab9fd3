"""The judge's table, JSON and report: the reward-model layout plus the count of each outcome."""

from __future__ import annotations

import json
from pathlib import Path

from evaluator.judging.outcomes import JudgedPrompt, Outcome, judged_result, tally
from evaluator.judging.output import format_judge_table, judge_json, outcome_rows, write_judge_report
from evaluator.judging.run import JudgeEvaluation

PROMPTS = {
    "open": [JudgedPrompt("知识", (Outcome.RIGHT, Outcome.INCONSISTENT)), JudgedPrompt("数学", (Outcome.UNPARSEABLE,))],
    "human": [JudgedPrompt("语言", (Outcome.RIGHT,))],
}
EVALUATION = JudgeEvaluation(judged_result(PROMPTS), {name: tally(p) for name, p in PROMPTS.items()})


def test_json_adds_the_judge_counts_to_the_metrics() -> None:
    data = judge_json(EVALUATION, "judge-7b")
    assert data["subsets"]["open"]["accuracy"] == 0.25 and data["subsets"]["human"]["exact_match"] == 1.0
    assert data["judge"]["pairs"] == 4 and data["judge"]["calls"] == 8 and data["judge"]["model"] == "judge-7b"
    assert data["judge"]["outcomes"] == {"right": 2, "wrong": 0, "tie": 0, "inconsistent": 1, "unparseable": 1}
    assert data["judge"]["per_subset"]["human"]["right"] == 1


def test_table_ends_with_a_row_per_subset_and_all() -> None:
    header, rows = outcome_rows(EVALUATION)
    assert header == ["Subset", "Pairs", "Right", "Wrong", "Tie", "Inconsistent", "Unparseable"]
    assert rows == [
        ["open", "3", "1", "0", "0", "1", "1"],
        ["human", "1", "1", "0", "0", "0", "0"],
        ["All", "4", "2", "0", "0", "1", "1"],
    ]
    text = format_judge_table(EVALUATION, "judge-7b")
    assert text.startswith("Generative judge judge-7b (paper semantics") and "Per category" in text


def test_report_carries_the_counts(tmp_path: Path) -> None:
    paths = write_judge_report(EVALUATION, "judge-7b", tmp_path / "r")
    assert json.loads(paths[0].read_text(encoding="utf-8"))["judge"]["outcomes"]["unparseable"] == 1
    readme = paths[2].read_text(encoding="utf-8")
    assert readme.startswith("# CheemsBench results: generative judge judge-7b") and "| All | 4 |" in readme
