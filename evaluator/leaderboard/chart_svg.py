"""The per-category chart as SVG text, for web pages: the report's chart (`evaluator.chart`) without matplotlib.

    svg = per_category_svg(result)   # str: one panel per subset, Acc. and Exact. bars per category

As in the report's PNG (after the paper's Figure 4): a panel per subset, a row per first-level
category with its accuracy and exact-match bars on a 0-1 axis, the subset's accuracy as a dashed
line, and the Overall in the title. Pure and fast (no matplotlib import), so a page can ask for it
on every load; hovering a bar shows its value. Text is drawn by the browser's fonts (Chinese included).
"""

from __future__ import annotations

from html import escape

from evaluator.metrics import EvalResult, SubsetMetrics
from evaluator.table import width as text_columns

ACC_COLOR, EXACT_COLOR = "#3b75af", "#ef8636"  # the report chart's colours
ROW, BAR, PLOT_WIDTH, TOP, BOTTOM, CHAR = 30, 11, 420, 78, 34, 7.5
BOLD = 'text-anchor="middle" font-weight="600"'
FONT = "font-family=\"'Noto Sans CJK SC','WenQuanYi Micro Hei','Microsoft YaHei',sans-serif\""


def per_category_svg(result: EvalResult, title: str = "CheemsBench per-category accuracy") -> str:
    """The chart of `result` as a standalone SVG document."""
    names = list(result.subsets)
    rows = max((len(s.per_category) for s in result.subsets.values()), default=0)
    label = max((text_columns(c) for s in result.subsets.values() for c in s.per_category), default=4)
    left = 16 + label * CHAR
    panel = left + PLOT_WIDTH + 24
    width, height = panel * max(len(names), 1), TOP + rows * ROW + BOTTOM
    heading = f"{title} (Overall {result.overall:.3f}, {result.semantics.value})"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height}" width="{width:.0f}" '
        f'height="{height}" role="img" aria-label="{escape(heading)}" {FONT} font-size="12">',
        '<rect width="100%" height="100%" fill="#fff"/>',
        f'<text x="{width / 2:.0f}" y="20" {BOLD} font-size="14">{escape(heading)}</text>',
        _legend(width),
    ]
    for index, name in enumerate(names):
        parts.append(_panel(name, result.subsets[name], index * panel + left, rows))
    parts.append("</svg>")
    return "\n".join(parts)


def _legend(width: float) -> str:
    x = width - 150
    return (
        f'<g class="legend"><rect x="{x:.0f}" y="30" width="12" height="12" fill="{ACC_COLOR}"/>'
        f'<text x="{x + 16:.0f}" y="40">Acc.</text>'
        f'<rect x="{x + 60:.0f}" y="30" width="12" height="12" fill="{EXACT_COLOR}"/>'
        f'<text x="{x + 76:.0f}" y="40">Exact.</text></g>'
    )


def _panel(name: str, subset: SubsetMetrics, x0: float, rows: int) -> str:
    """One subset: title, grid, one row of two bars per category, the subset accuracy dashed."""
    bottom = TOP + rows * ROW
    title = f"{name}: Acc. {subset.accuracy:.3f}  Exact. {subset.exact_match:.3f}"
    out = [
        f'<g class="panel" data-subset="{escape(name)}">',
        f'<text x="{x0 + PLOT_WIDTH / 2:.1f}" y="{TOP - 14}" {BOLD}>{escape(title)}</text>',
    ]
    for tick in range(6):
        x = x0 + PLOT_WIDTH * tick / 5
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{bottom}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle" fill="#555">{tick / 5:.1f}</text>')
    for row, (category, metrics) in enumerate(subset.per_category.items()):
        y = TOP + row * ROW + (ROW - 2 * BAR) / 2
        out.append(f'<text x="{x0 - 8:.1f}" y="{y + BAR + 4:.1f}" text-anchor="end">{escape(category)}</text>')
        out.append(_bar(x0, y, metrics.accuracy, ACC_COLOR, f"{category} Acc."))
        out.append(_bar(x0, y + BAR, metrics.exact_match, EXACT_COLOR, f"{category} Exact."))
    mean = x0 + PLOT_WIDTH * subset.accuracy
    out.append(f'<line x1="{mean:.1f}" y1="{TOP}" x2="{mean:.1f}" y2="{bottom}" stroke="{ACC_COLOR}" '
               f'stroke-dasharray="4 3"/>')  # fmt: skip
    out.append(f'<line x1="{x0:.1f}" y1="{bottom}" x2="{x0 + PLOT_WIDTH:.1f}" y2="{bottom}" stroke="#888"/>')
    out.append("</g>")
    return "\n".join(out)


def _bar(x0: float, y: float, value: float | None, color: str, label: str) -> str:
    shown = "no comparisons" if value is None else f"{value:.4f}"
    length = PLOT_WIDTH * (value or 0.0)
    return (
        f'<rect x="{x0:.1f}" y="{y:.1f}" width="{length:.1f}" height="{BAR}" fill="{color}">'
        f"<title>{escape(label)}: {shown}</title></rect>"
    )
