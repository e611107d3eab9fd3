r"""Rule-based response filter (paper section 4.1): abnormal length and excessive non-Chinese text.

The annotation service applies it to every sample before its tasks are made (a rejected response is stored
with its reason and never annotated); `cheems annotate filter` applies it to bench files.

Defaults, and why (the paper names the two rules, not their thresholds):
- max_chars 8,000: several times a long answer of the sample's models; what is longer is almost always a loop
  or a dump, and costs an annotator minutes to read;
- min_chars 1 (after stripping): an empty response has nothing to compare;
- min_chinese_ratio 0.3 of letters (CJK ideographs among CJK + other letters), judged from 20 letters on: a
  Chinese answer with English terms, names or formulas stays well above it, while code-switched or garbled
  answers (the paper's concern with some open models) fall below it;
- code and maths: the paper applies the same rules to every prompt and accepts "lower accuracy for prompts
  involving math or code" to keep recall high, so no category is exempt by default. The ratio is measured on the
  prose (`prose_only`, default on): fenced code blocks, inline code and TeX maths ($...$, \(...\), \[...\]) are
  not counted as non-Chinese text, since the paper's concern is code-switched or garbled language, and a Chinese
  explanation around a code block is neither. Where the prose is under 20 letters (an answer that is all code)
  the ratio is not judged. `prose_only=False` counts every letter (the bluntest rule, most recall);
  `ratio_exempt` names categories whose answers skip the ratio rule entirely (e.g. {"代码", "数学"}).
`reason(...)` states the broken rule with its threshold ("too_long>8000"), as the store keeps it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FilterConfig:
    min_chars: int = 1
    max_chars: int = 8000
    min_chinese_ratio: float = 0.3
    min_letters: int = 20  # below this many letters the ratio is not judged
    ratio_exempt: frozenset[str] = frozenset()  # categories whose answers skip the ratio rule (paper: none)
    prose_only: bool = True  # the ratio leaves out code blocks, inline code and TeX maths

    def __post_init__(self) -> None:
        if not 0 <= self.min_chinese_ratio <= 1:
            raise ValueError(f"min_chinese_ratio must be in [0, 1], got {self.min_chinese_ratio}")
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars {self.min_chars} > max_chars {self.max_chars}")
        if self.min_letters < 0:
            raise ValueError(f"min_letters must be >= 0, got {self.min_letters}")

    def as_json(self) -> dict[str, object]:
        """The thresholds, as a dataset or a report records them."""
        return {
            "min_chars": self.min_chars,
            "max_chars": self.max_chars,
            "min_chinese_ratio": self.min_chinese_ratio,
            "min_letters": self.min_letters,
            "ratio_exempt": sorted(self.ratio_exempt),
            "prose_only": self.prose_only,
        }


CODE_AND_MATH = re.compile(
    r"```.*?(?:```|\Z)"  # fenced code (an unclosed fence runs to the end)
    r"|`[^`\n]+`"  # inline code
    r"|\$\$.+?\$\$|\$[^$\n]+\$"  # TeX display and inline maths
    r"|\\\(.+?\\\)|\\\[.+?\\\]",
    re.DOTALL,
)


def prose(text: str) -> str:
    """The text without its fenced code blocks, inline code and TeX maths."""
    return CODE_AND_MATH.sub(" ", text)


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
    ratio, letters = chinese_ratio(prose(text) if config.prose_only else text)
    if category not in config.ratio_exempt and letters >= config.min_letters and ratio < config.min_chinese_ratio:
        return "non_chinese"
    return None


def reason(text: str, categories: Sequence[str] = (), config: FilterConfig = FilterConfig()) -> str | None:
    """The broken rule with its threshold ("too_short<1", "too_long>8000", "non_chinese<0.3"), or None to keep
    the response; `categories`: the prompt's, the first one deciding the ratio exemption."""
    rule = reject_reason(text, categories[0] if categories else None, config)
    threshold = {"too_short": f"<{config.min_chars}", "too_long": f">{config.max_chars}"}
    return None if rule is None else rule + threshold.get(rule, f"<{config.min_chinese_ratio:g}")
