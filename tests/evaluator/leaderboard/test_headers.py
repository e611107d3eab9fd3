"""Every reply of the leaderboard (pages, JSON, static files, errors, the admin API) carries the security headers,
and its pages hold no inline style or script for the Content-Security-Policy to refuse."""

from __future__ import annotations

from sqlalchemy import Engine

from evaluator.leaderboard.app import create_app
from services.store import lifecycle
from services.store.db import session_scope
from tests.web.conftest import serve_asgi
from tests.web.headers import assert_secure, fetch, inline_code

PAGES = ["/", "/?lang=en", "/models/rm-a", "/compare/rm-a/rm-b", "/models/rm-nobody", "/nowhere"]
OTHERS = ["/api", "/api/leaderboard", "/api/models/rm-a", "/api/models/rm-nobody", "/models/rm-a/chart.svg",
          "/health", "/static/web/style.css", "/static/web/page.js", "/static/leaderboard/leaderboard.css",
          "/static/leaderboard/leaderboard.js"]  # fmt: skip


def test_every_reply_has_the_headers_and_no_page_inline_code(engine: Engine) -> None:
    with session_scope(engine) as session:
        for model_id in ("rm-a", "rm-b"):
            lifecycle.register_checkpoint(session, f"/models/{model_id}", model_id, "person:ann")
    with serve_asgi(create_app(engine)) as base:
        for path in PAGES + OTHERS:
            status, headers, body = fetch(base + path)
            assert_secure(headers, f"GET {path} ({status})")
            if headers["content-type"].startswith("text/html"):
                assert inline_code(body) == [], path
        for path in ("/api/rollback", "/api/models/rm-a/promote"):
            status, headers, _ = fetch(base + path, "POST", b"{}")
            assert status == 401
            assert_secure(headers, f"POST {path}")
        status, _, body = fetch(base + "/static/leaderboard/leaderboard.css")
        assert status == 200 and "td.pos" in body  # the styles that were inline are served as a file
