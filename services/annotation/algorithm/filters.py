"""Rule-based response filter (paper section 4.1): abnormal length and excessive non-Chinese text.

Defaults: a response is rejected when it is empty or longer than 8,000 characters, or when under
30% of its letters are Chinese (CJK ideographs among CJK + Latin letters) while it has at least 20
letters. Code and math answers are legitimately letter-heavy, so the ratio rule skips the
categories in `ratio_exempt`. The paper favours recall here: better to drop a good response than
keep garbage.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FilterConfig:
    min_chars: int = 1
    max_chars: int = 8000
    min_chinese_ratio: float = 0.3
    min_letters: int = 20  # below this many letters the ratio is not judged
    ratio_exempt: frozenset[str] = field(default_factory=lambda: frozenset({"代码", "数学"}))

    def __post_init__(self) -> None:
        if not 0 <= self.min_chinese_ratio <= 1:
            raise ValueError(f"min_chinese_ratio must be in [0, 1], got {self.min_chinese_ratio}")
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars {self.min_chars} > max_chars {self.max_chars}")


def chinese_ratio(text: str) -> tuple[float, int]:
    """(share of CJK ideographs among letters, number of letters)."""
    cjk = latin = 0
    for ch in text:
        if "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf":
            cjk += 1
        elif ch.isalpha() and unicodedata.category(ch).startswith("L"):
            latin += 1
    letters = cjk + latin
    return (cjk / letters if letters else 1.0), letters


def reject_reason(text: str, category: str | None = None, config: FilterConfig = FilterConfig()) -> str | None:
    """The rule a response breaks ("too_short", "too_long", "non_chinese"), or None to keep it."""
    if len(text.strip()) < config.min_chars:
        return "too_short"
    if len(text) > config.max_chars:
        return "too_long"
    ratio, letters = chinese_ratio(text)
    if category not in config.ratio_exempt and letters >= config.min_letters and ratio < config.min_chinese_ratio:
        return "non_chinese"
    return None
