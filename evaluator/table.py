"""Plain-text and markdown tables that stay aligned with Chinese text (CJK glyphs are two columns wide)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence


def width(text: str) -> int:
    """Terminal columns `text` occupies."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, columns: int, right: bool = False) -> str:
    fill = " " * max(columns - width(text), 0)
    return fill + text if right else text + fill


def render_text(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns separated by two spaces; the first column left-aligned, the rest right-aligned."""
    table = [list(header), *map(list, rows)]
    widths = [max(width(row[i]) for row in table) for i in range(len(header))]
    lines = [
        "  ".join(pad(cell, w, right=i > 0) for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
        for row in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def render_markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
