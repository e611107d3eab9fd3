"""The leaderboard over HTTP (Starlette; `cheems service evaluation --http-port`, default 8056): pages and JSON.

    app = create_app(engine)          # run by uvicorn in the evaluation service (evaluator.server)

Pages (Chinese by default; `?lang=en` switches, remembered in a cookie):
    GET /                              every evaluated model, best first; progress updates while a run is going
    GET /models/{model_id}             the per-category chart and table, and the model's run history
    GET /compare/{a}/{b}[?limit=N]     two models side by side (GET /compare?a=&b= redirects here)
    GET /models/{model_id}/chart.svg   the per-category chart (SVG, drawn here)
JSON, the same data for scripts:
    GET /api                           this list
    GET /api/leaderboard               {"subsets": [...], "models": [{rank, model_id, overall, subsets: {name:
                                       {accuracy, exact_match, ece, prompts, pairs}}, latest_run: {state,
                                       items_scored, items_total, ...}, ...}]}, best first
    GET /api/models/{model_id}         the model's row, "result" (as `cheems eval --json`) and "runs", newest first
    GET /api/compare/{a}/{b}[?limit=N] {"a", "b", "overall_difference", "per_category": [...],
                                       "disagreements": [{prompt, responses: [{id, content, rank, a_score,
                                       b_score}], ...}], "note"}: differences are A - B; limit 1..100, default 10
    GET /health                        200 {"status": "serving"} while the store answers, else 503
    POST /api/models/{model_id}/promote, POST /api/rollback: for an admin's token (evaluator.leaderboard.admin)

Errors: JSON `{"error": message, "reason": word}` under /api (and for the chart), an HTML page elsewhere,
with the status of the error's kind: 400 a malformed id or query (the message names it), 404 an unknown
model or path, 409 a model without a finished evaluation, 405 another method; never a 500 for bad input.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

from prometheus_client import CollectorRegistry
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from cheems.errors import CheemsError
from cheems.formats.benchfile import BenchFormat
from cheems.formats.cheemsbench import BenchItem
from evaluator.errors import BadRequest, NotEvaluated
from evaluator.evaluate import BenchCache
from evaluator.leaderboard.admin import admin_routes
from evaluator.leaderboard.chart_svg import per_category_svg
from evaluator.leaderboard.compare_page import compare_page
from evaluator.leaderboard.comparison import compare, comparison_json
from evaluator.leaderboard.pages import leaderboard_page, model_page, nav
from evaluator.leaderboard.standings import leaderboard_json, model_json, model_view, standings
from evaluator.leaderboard.words import WORDS
from services.observe.http import instrumented
from services.observe.metrics import metrics_app
from services.web import (
    SecureHeaders,
    escape,
    json_error,
    layout,
    remember_language,
    request_language,
    static_mount,
    status_of,
)

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"
MAX_ID = 200  # characters of a model id in a URL; registered ids are far shorter
MAX_LIMIT = 100
STORE_DOWN = (OperationalError, InterfaceError)  # the database cannot be reached: 503, not a bug
API = {
    "/api/leaderboard": "every model, best first: Overall, per-subset accuracy, exact match and ECE, newest run",
    "/api/models/{model_id}": "one model: its row, full result (per category) and run history, newest first",
    "/api/compare/{a}/{b}?limit=N": "A vs B: per-category differences (A - B), the N prompts they disagree most on",
    "/models/{model_id}/chart.svg": "the per-category chart of the model's newest result (SVG)",
    "/health": "200 while the store answers, else 503",
    "POST /api/models/{model_id}/promote": "make the model production (an admin's bearer token; body: reason, force)",
    "POST /api/rollback": "production returns to the model before (an admin's bearer token; body: reason)",
}


class SharedCache(BenchCache):
    """A BenchCache the server's request threads can share."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def read(self, path: str | Path, fmt: BenchFormat = BenchFormat.AUTO) -> list[BenchItem]:
        with self._lock:
            return super().read(path, fmt)


def model_id_of(value: str, field: str = "model_id") -> str:
    """A model id from a URL; BadRequest naming `field` for one no model could have."""
    if not value.strip():
        raise BadRequest(f"{field}: name a model")
    if len(value) > MAX_ID:
        raise BadRequest(f"{field}: longer than {MAX_ID} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise BadRequest(f"{field}: control characters are not part of a model id")
    return value


def limit_of(request: Request) -> int:
    raw = request.query_params.get("limit", "10")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise BadRequest(f"limit: expected a whole number from 1 to {MAX_LIMIT}, got {raw[:40]!r}")
    return int(raw)


def create_app(engine: Engine, cache: BenchCache | None = None, registry: CollectorRegistry | None = None) -> ASGIApp:
    """The leaderboard's pages and JSON over the store `engine` (bench files read through `cache`), every reply
    with the pages' security headers (services.web.headers); with `registry`, Prometheus' `/metrics` of the
    process."""
    bench_cache = cache or SharedCache()

    def html(request: Request, page: str) -> HTMLResponse:
        response = HTMLResponse(page)
        if "lang" in request.query_params:
            remember_language(response, request_language(request))
        return response

    def board_page(request: Request) -> Response:
        return html(request, leaderboard_page(standings(engine), request_language(request)))

    def board_api(request: Request) -> Response:
        return JSONResponse(leaderboard_json(standings(engine)))

    def model_html(request: Request) -> Response:
        view = model_view(engine, model_id_of(request.path_params["model_id"]))
        return html(request, model_page(view, standings(engine), request_language(request)))

    def model_api(request: Request) -> Response:
        return JSONResponse(model_json(model_view(engine, model_id_of(request.path_params["model_id"]))))

    def chart(request: Request) -> Response:
        model_id = model_id_of(request.path_params["model_id"])
        result = model_view(engine, model_id).standing.result
        if result is None:
            raise NotEvaluated(f"model {model_id!r} has no finished evaluation yet: no chart")
        return Response(per_category_svg(result), media_type="image/svg+xml")

    def comparison(request: Request) -> Any:
        a = model_id_of(request.path_params["a"], "a")
        b = model_id_of(request.path_params["b"], "b")
        if a == b:
            raise BadRequest("b: choose a model other than a to compare with")
        return compare(engine, a, b, bench_cache, limit_of(request))

    def compare_html(request: Request) -> Response:
        return html(request, compare_page(comparison(request), standings(engine), request_language(request)))

    def compare_api(request: Request) -> Response:
        return JSONResponse(comparison_json(comparison(request)))

    def compare_form(request: Request) -> Response:
        a = model_id_of(request.query_params.get("a", ""), "a")
        b = model_id_of(request.query_params.get("b", ""), "b")
        target = f"/compare/{quote(a, safe='')}/{quote(b, safe='')}?lang={request_language(request)}"
        return RedirectResponse(target, status_code=303)

    def api_index(request: Request) -> Response:
        return JSONResponse({"endpoints": API})

    def health(request: Request) -> Response:
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as e:  # any failure to reach the store makes the process unready
            return json_error(503, f"the store does not answer: {type(e).__name__}", "unavailable")
        return JSONResponse({"status": "serving"})

    routes = [
        Route("/", board_page),
        Route("/models/{model_id}", model_html),
        Route("/models/{model_id}/chart.svg", chart),
        Route("/compare", compare_form),
        Route("/compare/{a}/{b}", compare_html),
        Route("/api", api_index),
        Route("/api/leaderboard", board_api),
        Route("/api/models/{model_id}", model_api),
        Route("/api/compare/{a}/{b}", compare_api),
        Route("/health", health),
        *admin_routes(engine, model_id_of),
        static_mount(),
        static_mount("/static/leaderboard", STATIC),
        *([Route("/metrics", metrics_app(registry))] if registry is not None else []),
    ]
    handlers: dict[Any, Any] = {kind: error_reply for kind in (CheemsError, HTTPException, *STORE_DOWN, Exception)}
    return SecureHeaders(instrumented(Starlette(routes=routes, exception_handlers=handlers), registry))


def error_reply(request: Request, exc: Exception) -> Response:
    """A refused request as JSON (API and chart) or as a page: the status of the error's kind."""
    if isinstance(exc, HTTPException):
        status, reason = exc.status_code, "not_found" if exc.status_code == 404 else "http_error"
        message = f"no page at {request.url.path}" if status == 404 else str(exc.detail)
    elif isinstance(exc, CheemsError):
        status, reason, message = status_of(exc), exc.reason, str(exc)
    elif isinstance(exc, STORE_DOWN):
        log.warning("%s %s: the store does not answer: %s", request.method, request.url.path, exc)
        status, reason, message = 503, "unavailable", "the store does not answer; try again shortly"
    else:  # a bug: logged, and said plainly
        log.exception("%s %s failed", request.method, request.url.path)
        status, reason, message = 500, "internal", f"the leaderboard could not answer: {type(exc).__name__}"
    if request.url.path.startswith("/api") or request.url.path.endswith(".svg") or request.url.path == "/health":
        return json_error(status, message, reason)
    lang = request_language(request)
    body = (f'<p class="notice error" id="error" data-reason="{escape(reason)}">{escape(message)}</p>'
            f'<p><a href="/">{WORDS.text("back", lang)}</a></p>')  # fmt: skip
    title = f"{status} · {WORDS.text('error_title', lang)}"
    return HTMLResponse(layout(title, body, lang, nav=nav(lang)), status_code=status)
