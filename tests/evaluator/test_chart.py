"""The grouped-bar chart (`plot_comparison`): a PNG of the figures, a missing value leaving its bar out."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from cheems.extras import MissingExtra
from evaluator.chart import plot_comparison


def test_grouped_bars_leave_missing_values_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: list[int] = []
    bar = plt.Axes.bar

    def counting(self: plt.Axes, xs: list[float], ys: list[float], **kwargs: object) -> object:
        drawn.append(len(ys))
        return bar(self, xs, ys, **kwargs)

    monkeypatch.setattr(plt.Axes, "bar", counting)
    series = {"Overall": [0.6, None, 0.7], "human Acc.": [0.9, None, 0.8]}
    path = plot_comparison(["human", "ai", "人类"], series, "Table 4", tmp_path / "t4.png")
    assert path == tmp_path / "t4.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn == [2, 2]


def test_without_the_charts_extra_the_import_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.delitem(sys.modules, "evaluator.chart", raising=False)
    with pytest.raises(MissingExtra, match=r"drawing charts .* pip install 'cheems\[charts\]'$"):
        import evaluator.chart  # noqa: F401
