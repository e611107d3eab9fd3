"""The scorer's HTTP API carries the pages' security headers on every reply (services.web.headers), refusals and
health included: its JSON is never framed, sniffed as HTML or followed by a Referer."""

from __future__ import annotations

from types import SimpleNamespace

from services.scorer.http.app import create_app
from services.scorer.telemetry import ScorerMetrics
from tests.web.conftest import serve_asgi
from tests.web.headers import assert_secure, fetch


def test_every_reply_has_the_security_headers() -> None:
    scorer = SimpleNamespace(config=SimpleNamespace(max_queries=4, max_message_bytes=1024), metrics=ScorerMetrics())
    app = create_app(scorer, lambda: True, authenticate=lambda token: None)  # type: ignore[arg-type]
    with serve_asgi(app) as base:
        for method, path, status in [("GET", "/health", 200), ("GET", "/metrics", 200),
                                     ("POST", "/get_reward", 401), ("POST", "/score?token=wrong", 401),
                                     ("GET", "/nowhere", 404)]:  # fmt: skip
            got, headers, _ = fetch(base + path, method, b"{}" if method == "POST" else None)
            assert got == status, path
            assert_secure(headers, f"{method} {path}")
