"""The page shell, languages, escaping and JSON errors of services.web."""

from __future__ import annotations

import json

import pytest
from starlette.responses import Response

from cheems import errors
from services.web import Catalog, escape, json_error, layout, remember_language, status_of
from services.web.i18n import pick_language


def test_layout_is_a_whole_document_with_escaped_title_and_linked_css() -> None:
    page = layout("<标注>", "<p>正文</p>", "zh", scripts=["/static/web/page.js"], nav=[("/a?x=1&y=2", "链接")])
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert '<html lang="zh-CN">' in page
    assert "<title>&lt;标注&gt; · Cheems</title>" in page
    assert "<main><p>正文</p></main>" in page
    assert '<link rel="stylesheet" href="/static/web/style.css">' in page  # a file: no inline style (CSP)
    assert '<script src="/static/web/page.js"></script>' in page
    assert '<a href="/a?x=1&amp;y=2">链接</a>' in page
    assert '<a href="?lang=en"' in page and '<span class="current" lang="zh">中文</span>' in page
    assert "http://" not in page and "https://" not in page  # nothing from another host


def test_english_layout_links_back_to_chinese() -> None:
    page = layout("Board", "", "en")
    assert '<html lang="en">' in page and '<a href="?lang=zh"' in page


@pytest.mark.parametrize(
    ("query", "cookie", "lang"),
    [(None, None, "zh"), ("en", None, "en"), (None, "en", "en"), ("zh", "en", "zh"), ("fr", None, "zh")],
)
def test_language_comes_from_the_query_then_the_cookie(query: str | None, cookie: str | None, lang: str) -> None:
    assert pick_language(query, cookie) == lang


def test_remember_language_sets_a_cookie_only_for_known_languages() -> None:
    assert "lang=en" in remember_language(Response(), "en").headers["set-cookie"]
    assert "set-cookie" not in remember_language(Response(), "xx").headers


def test_catalog_words() -> None:
    words = Catalog({"submit": ("提交", "Submit")}).merged(Catalog({"skip": ("跳过", "Skip")}))
    assert words.text("submit", "zh") == "提交" and words.text("skip", "en") == "Skip"
    assert words.table("en") == {"submit": "Submit", "skip": "Skip"}
    with pytest.raises(KeyError):
        words.text("nope", "zh")


def test_escape_and_json_errors() -> None:
    assert escape('<a href="x">\'') == "&lt;a href=&quot;x&quot;&gt;&#x27;"
    response = json_error(401, "令牌无效", "unauthenticated")
    assert response.status_code == 401
    assert json.loads(bytes(response.body)) == {"error": "令牌无效", "reason": "unauthenticated"}
    assert status_of(errors.InvalidInput("x")) == 400 and status_of(errors.Conflict("x")) == 409
    assert status_of(errors.NotFound("x")) == 404 and status_of(RuntimeError()) == 500
