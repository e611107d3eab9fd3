"""The JSON contract, the printed table, and the report folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evaluator.metrics import ScoredPrompt, Semantics, evaluate_subsets
from evaluator.report import format_markdown, format_table, from_json, to_json, write_report
from evaluator.table import pad, render_text, width


@pytest.fixture
def result():  # type: ignore[no-untyped-def]
    open_ = [ScoredPrompt("推理", (1, 2, 3), (3.0, 2.0, 1.0)), ScoredPrompt("安全", (1, 2), (0.0, 1.0))]
    human = [ScoredPrompt("复杂指令", (1, 2, 2), (1.0, 1.0, 0.0))]
    return evaluate_subsets({"open": open_, "human": human}, Semantics.OFFICIAL)


def test_json_follows_the_contract(result) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(json.dumps(to_json(result)))
    assert data["semantics"] == "official"
    assert data["overall"] == pytest.approx(result.overall)
    assert set(data["subsets"]) == {"open", "human"}
    open_ = data["subsets"]["open"]
    assert {"accuracy", "exact_match", "per_category"} <= set(open_)
    assert open_["per_category"]["推理"]["accuracy"] == 1.0
    safety = open_["per_category"]["安全"]
    assert (safety["accuracy"], safety["exact_match"], safety["prompts"], safety["pairs"]) == (0.0, 0.0, 1, 1)
    # a reward tie on a gold pair: wrong for accuracy, but no break of exact match in official semantics
    assert data["subsets"]["human"]["per_category"]["复杂指令"] | {"ece": None} == {
        "accuracy": 0.5,
        "exact_match": 1.0,
        "ece": None,
        "prompts": 1,
        "pairs": 2,
    }


def test_from_json_inverts_to_json(result) -> None:  # type: ignore[no-untyped-def]
    stored = json.loads(json.dumps(to_json(result)))  # as a database's JSON column gives it back
    assert from_json(stored) == result


def test_table_lists_subsets_overall_and_categories(result) -> None:  # type: ignore[no-untyped-def]
    text = format_table(result)
    assert "official semantics" in text
    lines = text.splitlines()
    assert any(line.startswith("open") and "1.0000" not in line for line in lines)
    assert any(line.startswith("Overall") and f"{result.overall:.4f}" in line for line in lines)
    category_line = next(line for line in lines if line.startswith("安全"))
    assert category_line.split()[1:] == ["0.0000", "0.0000", "-", "-"]


def test_cjk_aware_alignment() -> None:
    assert width("安全") == 4 and width("ab") == 2
    assert pad("安全", 6) == "安全  "
    text = render_text(["Category", "Acc."], [["复杂指令", "0.5"], ["Code", "1.0"]])
    rows = text.splitlines()
    assert len({width(r) for r in rows}) == 1  # every row ends in the same column


def test_report_folder(result, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    paths = write_report(result, tmp_path / "report")
    assert [p.name for p in paths] == ["results.json", "per_category.png", "README.md"]
    assert json.loads(paths[0].read_text(encoding="utf-8")) == json.loads(json.dumps(to_json(result)))
    assert paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].stat().st_size > 10_000
    markdown = paths[2].read_text(encoding="utf-8")
    assert "![Per-category accuracy](per_category.png)" in markdown
    assert "| 复杂指令 |" in markdown
    assert markdown == format_markdown(result, "per_category.png")


def test_chart_has_a_cjk_font() -> None:
    from evaluator.chart import use_cjk_font

    assert use_cjk_font()
