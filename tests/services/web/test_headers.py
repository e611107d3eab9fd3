"""The security headers middleware (services.web.headers): on every reply, errors and 500s included, and the page
shell with no inline style or script for the policy to refuse."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from services.web import SecureHeaders, layout, static_mount
from tests.web.conftest import serve_asgi
from tests.web.headers import assert_secure, fetch, inline_code


def broken(request: object) -> Response:
    raise RuntimeError("a bug")


def framed(request: object) -> Response:
    return Response("x", headers={"x-frame-options": "SAMEORIGIN"})


APP = Starlette(
    routes=[
        Route("/page", lambda r: HTMLResponse(layout("页", "<p>正文</p>", "zh", scripts=["/static/web/page.js"]))),
        Route("/json", lambda r: JSONResponse({"ok": True})),
        Route("/broken", broken),
        Route("/framed", framed),
        static_mount(),
    ]
)


def test_every_reply_carries_the_headers_errors_and_500s_included() -> None:
    with serve_asgi(SecureHeaders(APP)) as base:
        for path, status in [("/page", 200), ("/json", 200), ("/static/web/style.css", 200),
                             ("/static/web/page.js", 200), ("/nowhere", 404), ("/broken", 500)]:  # fmt: skip
            got, headers, _ = fetch(base + path)
            assert got == status, path
            assert_secure(headers, path)
        got, headers, _ = fetch(base + "/json", "POST", b"{}")
        assert got == 405
        assert_secure(headers, "POST /json")
        _, headers, _ = fetch(base + "/framed")
        assert headers["x-frame-options"] == "SAMEORIGIN"  # the app's own header is kept


def test_the_page_shell_has_no_inline_code_and_links_its_stylesheet() -> None:
    page = layout("页", "<p>正文</p>", "zh", scripts=["/static/web/page.js"], nav=[("/", "首页")])
    assert inline_code(page) == []
    assert '<link rel="stylesheet" href="/static/web/style.css">' in page


def test_inline_code_finds_what_the_policy_refuses() -> None:
    found = inline_code('<style>p{}</style><script>x()</script><p style="color:red" onclick="y()">')
    assert len(found) == 4
    assert inline_code('<script src="/a.js"></script><script id="w" type="application/json">{}</script>') == []
