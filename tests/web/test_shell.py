"""The shared page shell in a real Chromium: it renders, switches language, and a hostile response stays text."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from services.web import Catalog, layout, remember_language, render_markdown, request_language, static_mount
from tests.web.conftest import serve_asgi

WORDS = Catalog({"hello": ("你好，标注员", "Hello, annotator")})
HOSTILE = "<script>window.pwned = 1</script>\n\n[点我](javascript:window.pwned=2) ![图](http://example.com/x.png) $a_b$"


def shell_app() -> Starlette:
    async def home(request: Request) -> HTMLResponse:
        lang = request_language(request)
        body = f'<p id="hello">{WORDS.text("hello", lang)}</p><div class="md card">{render_markdown(HOSTILE)}</div>'
        page = layout("外壳", body, lang, scripts=["/static/web/page.js"])
        return remember_language(HTMLResponse(page), lang)  # type: ignore[return-value]

    return Starlette(routes=[Route("/", home), static_mount()])


def test_the_shell_renders_switches_language_and_keeps_hostile_text_inert(page: Any, screenshot: Any) -> None:
    with serve_asgi(shell_app()) as base:
        page.goto(base + "/")
        assert page.inner_text("#hello") == "你好，标注员"
        assert page.evaluate("typeof window.cheems.fetchJSON") == "function"  # the static mount serves page.js
        assert page.evaluate("window.pwned") is None
        assert "<script>" in page.inner_text(".md")  # shown as text
        assert page.inner_text(".md .math") == "$a_b$"
        page.click("a[data-lang=en]")
        assert page.inner_text("#hello") == "Hello, annotator"
        page.goto(base + "/")  # the cookie keeps English
        assert page.inner_text("#hello") == "Hello, annotator"
        assert page.evaluate("document.documentElement.lang") == "en"
        screenshot(page, "web-shell")
