"""Charts in the house style: per-category accuracy, one panel per subset (after the paper's Figure 4), and grouped
bars comparing models or recipes on a few figures (the ablation's Table 4)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from cheems.extras import need

try:
    import matplotlib
except ModuleNotFoundError:
    need("charts")  # the `charts` extra: one line that says so, where matplotlib itself is missing
    raise

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib import font_manager

from evaluator.metrics import EvalResult

log = logging.getLogger(__name__)
CJK_FONT = "NotoSansCJKsc-Regular.otf"


def use_cjk_font() -> bool:
    """Register the Noto Sans CJK SC font shipped by `mplfonts` so category names render."""
    try:
        path = resources.files("mplfonts") / "fonts" / CJK_FONT
        font_manager.fontManager.addfont(str(path))
    except (ModuleNotFoundError, FileNotFoundError, RuntimeError) as e:
        log.warning("no CJK font (%s); Chinese labels may render as boxes", e)
        return False
    name = font_manager.FontProperties(fname=str(path)).get_name()
    plt.rcParams["font.family"] = [name, "DejaVu Sans"]
    plt.rcParams["axes.unicode_minus"] = False
    return True


def plot_per_category(result: EvalResult, path: str | Path) -> Path:
    use_cjk_font()
    names = list(result.subsets)
    rows = max(len(s.per_category) for s in result.subsets.values())
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 1.2 + 0.45 * rows), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        subset = result.subsets[name]
        categories = list(subset.per_category)
        acc = [subset.per_category[c].accuracy or 0.0 for c in categories]
        exact = [subset.per_category[c].exact_match for c in categories]
        y = range(len(categories))
        ax.barh([i + 0.2 for i in y], acc, height=0.4, label="Acc.", color="#3b75af")
        ax.barh([i - 0.2 for i in y], exact, height=0.4, label="Exact.", color="#ef8636")
        ax.set_yticks(list(y), categories)
        ax.invert_yaxis()
        ax.set_xlim(0, 1)
        ax.axvline(subset.accuracy, color="#3b75af", linestyle="--", linewidth=1)
        ax.set_title(f"{name}: Acc. {subset.accuracy:.3f}  Exact. {subset.exact_match:.3f}")
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=2, frameon=False)
    fig.suptitle(f"CheemsBench per-category accuracy (Overall {result.overall:.3f}, {result.semantics.value})")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def plot_comparison(
    labels: Sequence[str], series: Mapping[str, Sequence[float | None]], title: str, path: str | Path
) -> Path:
    """Grouped bars: one group per label (a model, a recipe), one bar per series (Overall, a subset's Acc. ...).
    A missing value (None) leaves its bar out."""
    use_cjk_font()
    names = list(series)
    width = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(labels) * len(names) + 3), 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, name in enumerate(names):
        xs = [i + (k - (len(names) - 1) / 2) * width for i, v in enumerate(series[name]) if v is not None]
        ys = [v for v in series[name] if v is not None]
        ax.bar(xs, ys, width=width, label=name, color=colors[k % len(colors)])
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
