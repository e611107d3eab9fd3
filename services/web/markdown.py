"""Responses as safe HTML: Markdown (CommonMark, tables, strikethrough, fenced code) with math left as text.

    render_markdown("**粗体** 与 $a_b$\\n```python\\nprint(1)\\n```")

Safe by construction: raw HTML in the text is shown as text, `javascript:`/`data:` links are refused by
markdown-it's link check, links get rel="noopener noreferrer nofollow", and images are not rendered (a
response may not make the page load anything from another host). Math ($...$, $$...$$, \\(...\\),
\\[...\\]) is kept verbatim in <span class="math"> so Markdown does not eat its underscores and
backslashes; no math is typeset (that would need a library from elsewhere).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from services.web.html import escape

# opening delimiter -> closing delimiter, longest first
MATH_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))


def find_math(src: str, pos: int) -> tuple[int, str] | None:
    """(end, inner text) of a math span opening at `pos` in `src`, or None when none opens there."""
    for opening, closing in MATH_DELIMITERS:
        if not src.startswith(opening, pos):
            continue
        start = pos + len(opening)
        end = src.find(closing, start)
        if opening == "$":
            end = single_dollar_end(src, start)
        if end > start:
            return end + len(closing), src[start:end]
    return None


def single_dollar_end(src: str, start: int) -> int:
    """Where a `$...$` span opened before `start` closes, or -1: prices ("$5 and $10") are not math, so the
    inside may not start or end with a space and the closing `$` may not be followed by a digit."""
    if start >= len(src) or src[start].isspace():
        return -1
    end = src.find("$", start)
    while end != -1:
        if not src[end - 1].isspace() and not (end + 1 < len(src) and src[end + 1].isdigit()):
            return end
        end = src.find("$", end + 1)
    return -1


def math_rule(state: StateInline, silent: bool) -> bool:
    """markdown-it inline rule: a math span becomes one `math` token holding its source text."""
    found = find_math(state.src[: state.posMax], state.pos)
    if found is None:
        return False
    end, _ = found
    if not silent:
        token = state.push("math", "span", 0)
        token.content = state.src[state.pos : end]
    state.pos = end
    return True


def render_math(_renderer: Any, tokens: Sequence[Token], idx: int, _options: Any, _env: Any) -> str:
    return f'<span class="math">{escape(tokens[idx].content)}</span>'


def render_link_open(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    return str(renderer.renderToken(tokens, idx, options, env))


@cache
def parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])
    md.disable("image")
    md.inline.ruler.before("escape", "math", math_rule)
    md.add_render_rule("math", render_math)
    md.add_render_rule("link_open", render_link_open)
    return md


def render_markdown(text: str) -> str:
    """`text` (Markdown) as HTML safe to put in a page as is."""
    return parser().render(text)
