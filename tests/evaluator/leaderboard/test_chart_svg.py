"""The per-category chart as SVG: well-formed, a panel per subset, bars as long as their figures, text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from evaluator.evaluate import evaluate_files
from evaluator.leaderboard.chart_svg import PLOT_WIDTH, per_category_svg
from evaluator.metrics import CategoryMetrics, EvalResult, Semantics, SubsetMetrics

SVG = "{http://www.w3.org/2000/svg}"


def result() -> EvalResult:
    open_ = {"代码": CategoryMetrics(0.75, 0.5, 0.1, 4, 8), 'a<b>&"c"': CategoryMetrics(None, 1.0, None, 1, 0)}
    human = {"安全": CategoryMetrics(0.25, 0.0, 0.2, 2, 4)}
    subsets = {"open": SubsetMetrics(0.75, 0.75, 0.1, open_, 5, 8), "human": SubsetMetrics(0.25, 0.0, 0.2, human, 2, 4)}
    return EvalResult(Semantics.OFFICIAL, 0.4375, subsets)


def test_one_panel_per_subset_with_bars_as_long_as_the_figures() -> None:
    svg = per_category_svg(result())
    root = ET.fromstring(svg)  # well-formed, special characters escaped
    panels = root.findall(f".//{SVG}g[@class='panel']")
    assert [p.get("data-subset") for p in panels] == ["open", "human"]
    bars = {r.find(f"{SVG}title").text: float(r.get("width")) for r in panels[0].iter(f"{SVG}rect")}  # type: ignore[union-attr]
    assert bars["代码 Acc.: 0.7500"] == round(PLOT_WIDTH * 0.75, 1)
    assert bars["代码 Exact.: 0.5000"] == round(PLOT_WIDTH * 0.5, 1)
    assert bars['a<b>&"c" Acc.: no comparisons'] == 0.0  # no accuracy: no bar, said in its tooltip
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert 'a<b>&"c"' in texts and "open: Acc. 0.750  Exact. 0.750" in texts
    assert any("Overall 0.438, official" in (t or "") for t in texts)


def test_the_sample_result_draws(sample_paths: tuple[list[Path], Path]) -> None:
    bench, rewards = sample_paths
    drawn = per_category_svg(evaluate_files(bench, rewards))
    assert ET.fromstring(drawn).get("role") == "img" and "代码" in drawn
