"""HttpMetrics on a small Starlette app served by a real uvicorn: counts and times scraped from its live /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import requests
from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from services.observe.http import UNMATCHED, HttpMetrics
from services.observe.metrics import metrics_app, new_registry
from tests.services.observe.scrape import parse, promtool_problems, sample_value
from tests.web.conftest import serve_asgi

COUNT = "http_requests_total"
DURATION = "http_request_duration_seconds_count"
IN_PROGRESS = "http_requests_in_progress"


class Site:
    """A tiny app with path parameters, a mount, a failing route and a streamed body held open until released."""

    def __init__(self, static: str) -> None:
        self.release = asyncio.Event()
        self.registry = new_registry()

        async def item(request: Request) -> Response:
            return JSONResponse(dict(request.path_params))

        async def boom(request: Request) -> Response:
            raise RuntimeError("a bug")

        async def stream(request: Request) -> Response:
            async def body() -> AsyncIterator[bytes]:
                yield b"first\n"
                await self.release.wait()
                yield b"last\n"

            return StreamingResponse(body())

        async def release(request: Request) -> Response:
            self.release.set()
            return PlainTextResponse("released")

        async def later(request: Request) -> Response:  # work after the reply, which the caller does not wait for
            return PlainTextResponse("done", background=BackgroundTask(self.release.wait))

        api = [Route("/users/{user_id:int}", item), Route("/ping", item, methods=["POST"])]
        routes = [
            Route("/items/{item_id}", item),
            Route("/boom", boom),
            Route("/stream", stream),
            Route("/release", release),
            Route("/later", later),
            Mount("/api", routes=api),
            Mount("/static", app=StaticFiles(directory=static)),
            Route("/metrics", metrics_app(self.registry)),
        ]
        self.app = HttpMetrics(Starlette(routes=routes), self.registry)


@pytest.fixture
def site(tmp_path: Any) -> Iterator[tuple[str, Site]]:
    (tmp_path / "a.css").write_text("body {}")
    made = Site(str(tmp_path))
    with serve_asgi(made.app) as base:
        yield base, made


def scraped(base: str) -> tuple[dict[str, Any], str]:
    text = requests.get(f"{base}/metrics", timeout=10).text
    return parse(text), text


def count(families: dict[str, Any], method: str, path: str, status: int) -> float:
    return sample_value(families, COUNT, {"method": method, "path": path, "status": str(status)})


def test_requests_are_counted_by_route_template_and_status(site: tuple[str, Site]) -> None:
    base, _ = site
    before, _ = scraped(base)
    calls = [
        ("GET", "/items/1", 200), ("GET", "/items/2", 200), ("GET", "/items/a%20b", 200),
        ("GET", "/api/users/7", 200), ("GET", "/api/users/x", 404), ("GET", "/api/ping", 405),
        ("GET", "/static/a.css", 200), ("GET", "/static/none.css", 404), ("GET", "/nowhere/1", 404),
        ("GET", "/nowhere/2", 404), ("GET", "/boom", 500), ("BREW", "/items/3", 405),
    ]  # fmt: skip
    for method, path, status in calls:
        assert requests.request(method, base + path, timeout=10).status_code == status, path
    after, text = scraped(base)
    expected = {
        ("GET", "/items/{item_id}", 200): 3,
        ("GET", "/api/users/{user_id:int}", 200): 1,
        ("GET", UNMATCHED, 404): 3,  # /api/users/x: the int convertor refuses it, as the router does
        ("GET", "/api/ping", 405): 1,
        ("GET", "/static/{path}", 200): 1,
        ("GET", "/static/{path}", 404): 1,
        ("GET", "/boom", 500): 1,
        ("OTHER", "/items/{item_id}", 405): 1,
    }
    for (method, path, status), delta in expected.items():
        assert count(after, method, path, status) - count(before, method, path, status) == delta, (method, path)
    labelled = {s.labels["path"] for f in after.values() for s in f.samples if s.name == COUNT}
    assert labelled == {path for _, path, _ in expected}  # no raw URL, and /metrics itself not counted
    for method, path, _ in expected:
        assert sample_value(after, DURATION, {"method": method, "path": path}) == sum(
            n for (m, p, _), n in expected.items() if (m, p) == (method, path)
        )
        assert sample_value(after, IN_PROGRESS, {"method": method, "path": path}) == 0
    assert promtool_problems(text) == ""


def test_a_streamed_response_is_in_progress_until_its_body_ends(site: tuple[str, Site]) -> None:
    base, made = site
    labels = {"method": "GET", "path": "/stream"}
    with requests.get(f"{base}/stream", stream=True, timeout=10) as reply:
        lines = reply.iter_lines()
        assert next(lines) == b"first"
        during, _ = scraped(base)
        assert sample_value(during, IN_PROGRESS, labels) == 1
        assert sample_value(during, DURATION, labels) == 0
        assert count(during, "GET", "/stream", 200) == 0
        assert requests.get(f"{base}/release", timeout=10).status_code == 200
        assert list(lines) == [b"last"]
    after, _ = scraped(base)
    assert made.release.is_set()
    assert sample_value(after, IN_PROGRESS, labels) == 0
    assert sample_value(after, DURATION, labels) == 1 and count(after, "GET", "/stream", 200) == 1


def test_work_after_the_response_is_not_timed_as_the_request(site: tuple[str, Site]) -> None:
    base, made = site
    assert requests.get(f"{base}/later", timeout=10).text == "done"
    during, _ = scraped(base)  # its background task still waits
    labels = {"method": "GET", "path": "/later"}
    assert not made.release.is_set()
    assert sample_value(during, IN_PROGRESS, labels) == 0 and sample_value(during, DURATION, labels) == 1
    assert count(during, "GET", "/later", 200) == 1
    requests.get(f"{base}/release", timeout=10)
    assert count(scraped(base)[0], "GET", "/later", 200) == 1  # counted once


def test_two_apps_in_one_process_count_apart(tmp_path: Any) -> None:
    (tmp_path / "a.css").write_text("body {}")
    one, two = Site(str(tmp_path)), Site(str(tmp_path))
    with serve_asgi(one.app) as a, serve_asgi(two.app) as b:
        for _ in range(2):
            requests.get(f"{a}/items/1", timeout=10)
        requests.get(f"{b}/items/1", timeout=10)
        assert count(scraped(a)[0], "GET", "/items/{item_id}", 200) == 2
        assert count(scraped(b)[0], "GET", "/items/{item_id}", 200) == 1


def test_metrics_itself_is_counted_when_not_skipped() -> None:
    registry = new_registry()
    app = HttpMetrics(Starlette(routes=[Route("/metrics", metrics_app(registry))]), registry, skip=())
    with serve_asgi(app) as base:
        scraped(base)
        families, _ = scraped(base)
    assert count(families, "GET", "/metrics", 200) == 1  # the first scrape, ended before the second read


def test_an_app_raising_before_it_answers_is_counted_as_500() -> None:
    async def failing(scope: Any, receive: Any, send: Any) -> None:  # a bare ASGI app: nothing answers for it
        raise RuntimeError("a bug")

    registry = new_registry()
    app = HttpMetrics(failing, registry, routes=[Route("/things/{name}", failing)])
    with serve_asgi(app) as base:
        assert requests.get(f"{base}/things/a", timeout=10).status_code == 500  # uvicorn's own reply
    families = parse(generate_latest(registry).decode())
    assert count(families, "GET", "/things/{name}", 500) == 1
    assert sample_value(families, IN_PROGRESS, {"method": "GET", "path": "/things/{name}"}) == 0
