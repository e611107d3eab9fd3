"""Responses as safe HTML: Markdown renders, math stays text, nothing hostile or remote survives."""

from __future__ import annotations

from services.web.markdown import find_math, render_markdown


def test_markdown_renders_code_tables_and_lists() -> None:
    html = render_markdown(
        "**快速排序**：\n\n```python\nprint('你好')\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- 一\n- 二"
    )
    assert "<strong>快速排序</strong>" in html
    assert "<pre><code class=\"language-python\">print('你好')\n</code></pre>" in html
    assert "<table>" in html and "<td>2</td>" in html
    assert "<li>二</li>" in html


def test_math_is_left_as_text_in_every_notation() -> None:
    html = render_markdown("设 $x_1 + x_2$，且 $$\\sum_{i} a_i$$ 与 \\(a*b*c\\) 和 \\[e^{i\\pi}\\]")
    assert '<span class="math">$x_1 + x_2$</span>' in html
    assert '<span class="math">$$\\sum_{i} a_i$$</span>' in html
    assert '<span class="math">\\(a*b*c\\)</span>' in html  # no emphasis eaten
    assert '<span class="math">\\[e^{i\\pi}\\]</span>' in html


def test_prices_are_not_math() -> None:
    assert find_math("$5 and $10", 0) is None
    assert 'class="math"' not in render_markdown("苹果 $5，梨 $10")
    assert find_math("$ a$", 0) is None
    assert find_math("$a$ b", 0) == (3, "a")


def test_raw_html_scripts_links_and_images_are_inert() -> None:
    html = render_markdown(
        "<script>alert(1)</script> <img src=x onerror=alert(2)>\n\n"
        "[x](javascript:alert(3)) ![i](http://example.com/a.png) [ok](https://example.com)"
    )
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html
    assert 'href="javascript' not in html
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">ok</a>' in html


def test_math_inside_code_is_code() -> None:
    assert render_markdown("`$a$`") == "<p><code>$a$</code></p>\n"
