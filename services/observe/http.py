"""Prometheus RED metrics of an HTTP app, as an ASGI middleware recording into the app's own registry.

    app = HttpMetrics(Starlette(routes=routes), registry)      # the registry its /metrics serves

Series, with the names starlette-exporter and most HTTP dashboards use:
- `http_requests_total{method,path,status}`: requests answered, by the status their response started with (500
  when the app raised before it started one);
- `http_request_duration_seconds{method,path}`: seconds from the request's arrival to its response's last body
  part (a streamed body: its end, not its first part);
- `http_requests_in_progress{method,path}`: requests begun and not yet answered.

`path` is the template of the route the request matched (`/models/{model_id}`; a mount's path and its route's,
`/static/web/{path}` for a mount without routes), never the URL itself: one series per raw URL would grow without
bound. A request no route matches is labelled `<unmatched>`, and a method outside the standard ones `OTHER`, for
the same reason. The paths in `skip` (by default `/metrics`) are not counted: Prometheus' own scrapes would otherwise
be most of the requests, and its `up` and `scrape_duration_seconds` already describe them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.observe.metrics import HANDLING_BUCKETS

UNMATCHED = "<unmatched>"
OTHER = "OTHER"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})


def route_template(routes: Iterable[BaseRoute], scope: Scope) -> str:
    """The template of the route `scope` matches among `routes`, as Starlette's router picks it (the first full
    match, else the first partial one: a known path with a method it does not take); UNMATCHED when none does."""
    partial = None
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            return _template(route, {**scope, **child})
        if match is Match.PARTIAL and partial is None:
            partial = (route, child)
    if partial is not None:
        return _template(partial[0], {**scope, **partial[1]})
    return UNMATCHED


def _template(route: BaseRoute, scope: Scope) -> str:
    if isinstance(route, Mount):
        inner = route.routes
        if not inner:  # an app mounted whole (static files): what lies below is its own
            return f"{route.path}/{{path}}"
        below = route_template(inner, scope)
        return UNMATCHED if below == UNMATCHED else route.path + below
    return str(getattr(route, "path", UNMATCHED))


class HttpMetrics:
    """ASGI middleware counting and timing the HTTP requests of `app` in `registry`.

    `routes`: where templates are looked up (by default `app.routes`, a Starlette app's); install it directly
    around the Starlette app, so that its routes are known and a response its error handlers send is counted with
    the status they gave. Websocket and lifespan events pass through uncounted.
    """

    def __init__(
        self,
        app: ASGIApp,
        registry: CollectorRegistry,
        routes: Sequence[BaseRoute] | None = None,
        skip: Iterable[str] = ("/metrics",),
    ) -> None:
        self.app = app
        self.routes: Sequence[BaseRoute] = routes if routes is not None else getattr(app, "routes", [])
        self.skip = frozenset(skip)
        self.requests = Counter(
            "http_requests", "HTTP requests answered, by method, route template and status",
            ["method", "path", "status"], registry=registry,
        )  # fmt: skip
        self.seconds = Histogram(
            "http_request_duration_seconds", "Seconds from an HTTP request's arrival to its response's end",
            ["method", "path"], buckets=HANDLING_BUCKETS, registry=registry,
        )  # fmt: skip
        self.in_progress = Gauge(
            "http_requests_in_progress", "HTTP requests begun and not yet answered", ["method", "path"],
            registry=registry,
        )  # fmt: skip

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_template(self.routes, scope)
        if path in self.skip:
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in METHODS else OTHER
        request = _Request(self, method, path)
        try:
            await self.app(scope, receive, request.watch(send))
        except BaseException:
            request.end(500)
            raise
        request.end(500)  # returned without a response: the server answers 500 (a response sent already ended it)


class _Request:
    """One request under way: ended once, at its response's last body part or when the app returns or raises."""

    def __init__(self, metrics: HttpMetrics, method: str, path: str) -> None:
        self.metrics, self.method, self.path = metrics, method, path
        self.status: int | None = None
        self.ended = False
        self.began = time.perf_counter()
        metrics.in_progress.labels(method, path).inc()

    def watch(self, send: Send) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.status = int(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.end(500)

        return sending

    def end(self, status_if_none: int) -> None:
        if self.ended:
            return
        self.ended = True
        metrics, labels = self.metrics, (self.method, self.path)
        metrics.seconds.labels(*labels).observe(time.perf_counter() - self.began)
        metrics.requests.labels(*labels, str(self.status if self.status is not None else status_if_none)).inc()
        metrics.in_progress.labels(*labels).dec()


def instrumented(app: Any, registry: CollectorRegistry | None) -> Any:
    """`app` with HttpMetrics into `registry`, or `app` itself when there is no registry (metrics off)."""
    return app if registry is None else HttpMetrics(app, registry)
