"""Per-category accuracy chart, one panel per subset (after the paper's Figure 4)."""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path

import matplotlib

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
