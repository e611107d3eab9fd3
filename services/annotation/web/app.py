"""HTTP adapter of the annotator's page (Starlette, run by uvicorn beside the gRPC server): pages and their JSON.

    GET  /annotate                          the annotator's page (signs in with a token, then works the queue)
    GET  /admin                             the admin overview page
    GET  /health                            200 {"status": "serving"} when the store answers, else 503
    GET  /api/me                            {"name", "admin"}
    GET  /api/tasks/next                    {"task": TASK | null, "withheld": int}: the oldest task the annotator
                                            holds, opened now (its lease starts again), else one the queue gives
                                            them now (the rule of their gRPC ListTasks, one task); with no task,
                                            withheld counts the free triples left for other annotators
    POST /api/tasks/{task_id}/annotation    {"annotation_id", "order": [[id, ...], ...], "discarded": [id]}
                                            -> {"created": bool, "message"}; created false: already stored
    GET  /api/overview                      admins: {"annotators": [ROW], "open_tasks", "free_tasks",
                                            "unfinishable", "doubles", "rule_filtered"}

    TASK = {"task_id", "prompt_id", "prompt", "prompt_html", "system_prompt", "history": [{"role", "content",
            "html"}], "category", "source", "responses": [{"id", "label" (A, B, C), "content", "html"}]}
    ROW  = {"name", "account", "admin", "active", "open", "idle", "oldest_seconds", "done", "compared", "agreeing",
            "agreement", "on_cycles", "cycle_share"}   (agreement / cycle_share null before there is anything to
            measure): open tasks held, of which idle past the lease, the oldest claimed or opened how long ago (null:
            none held)
    unfinishable = {"prompts", "needed", "accounts", "people_per_prompt"}: prompts with open triples that need more
            different people (at most `needed`) than the `accounts` that annotate, under the service's rule
    doubles = {"triples", "compared", "agreeing", "agreement", "target", "pairs": [{"annotators": [a, b],
               "triples", "compared", "agreeing", "agreement"}]}: the doubled triples with both copies annotated
    rule_filtered = {"counts": {reason: n}, "newest": [{"prompt_id", "response", "reason", "excerpt"}]}: the
               responses the rule filter kept out of annotation ("too_long>8000", "non_chinese<0.3", ...)

Every /api call takes `authorization: Bearer <token>` (`cheems annotators add NAME` prints one). Errors are
JSON {"error", "reason"}: 401 no or wrong token, 403 not an admin / a task not given to you, 400 a body or
id the page would never send, 404 unknown task or path, 409 stale task or one completed by someone else.
`html` fields are Markdown rendered safe on the server (`services.web.render_markdown`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from cheems.errors import CheemsError
from services.access import bearer_of
from services.annotation.algorithm.doubles import TARGET, Agreement, DoubleAgreement
from services.annotation.service import OpenTask
from services.annotation.web import pages
from services.annotation.web.form import InvalidForm
from services.annotation.web.workbench import AnnotatorRow, Person, Workbench
from services.observe.http import instrumented
from services.observe.metrics import metrics_app
from services.store.filtered import FilteredResponse
from services.web import SecureHeaders, error_response, json_error, read_json, render_markdown, static_mount

log = logging.getLogger(__name__)
TASK_ID = re.compile(r"^[0-9a-f]{64}$")  # task ids are sha256 hex (store.validate.task_id_for)
MAX_BODY = 64 * 1024  # a ranking is a few hundred bytes
EXCERPT = 120  # characters of a filtered response the overview shows
LABELS = "ABCDEFGHIJ"


def task_json(task: OpenTask) -> dict[str, Any]:
    return {
        "task_id": task.task_id,
        "prompt_id": task.prompt_id,
        "prompt": task.prompt,
        "prompt_html": render_markdown(task.prompt),
        "system_prompt": task.system_prompt,
        "history": [{"role": r, "content": c, "html": render_markdown(c)} for r, c in task.history],
        "category": task.category,
        "source": task.source,
        "responses": [
            {"id": key, "label": LABELS[i], "content": content, "html": render_markdown(content)}
            for i, (key, content) in enumerate(task.contents.items())
        ],
    }


def row_json(row: AnnotatorRow, now: datetime) -> dict[str, Any]:
    q, held = row.quality, row.held
    return {
        "name": row.name,
        "account": row.account,
        "admin": row.admin,
        "active": row.active,
        "open": held.tasks if held else 0,
        "idle": held.idle if held else 0,
        "oldest_seconds": round((now - held.oldest).total_seconds()) if held else None,
        "done": q.annotations if q else 0,
        "compared": q.compared if q else 0,
        "agreeing": q.agreeing if q else 0,
        "agreement": q.agreement if q else None,
        "on_cycles": q.on_cycles if q else 0,
        "cycle_share": q.cycle_share if q else None,
    }


def agreement_json(figures: Agreement) -> dict[str, Any]:
    return {
        "triples": figures.triples,
        "compared": figures.compared,
        "agreeing": figures.agreeing,
        "agreement": figures.agreement,
    }


def doubles_json(figures: DoubleAgreement) -> dict[str, Any]:
    pairs = [{"annotators": list(names), **agreement_json(a)} for names, a in figures.by_pair.items()]
    return {**agreement_json(figures), "target": TARGET, "pairs": pairs}


def filtered_json(response: FilteredResponse) -> dict[str, Any]:
    """A response the rule filter kept out, as the overview lists it (its text cut to EXCERPT characters)."""
    cut = response.content[:EXCERPT] + ("…" if len(response.content) > EXCERPT else "")
    return {"prompt_id": response.prompt_id, "response": response.key, "reason": response.reason, "excerpt": cut}


def bearer(request: Request) -> str | None:
    return bearer_of(request.headers.get("authorization", "")) or None


Handler = Callable[[Request], Awaitable[Response]]


def guarded(work: Handler) -> Handler:
    """Errors become JSON with their status; anything unexpected is logged and answered 500 without details."""

    async def handle(request: Request) -> Response:
        try:
            return await work(request)
        except CheemsError as e:
            return error_response(e)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            return json_error(500, "internal error (logged by the service)", "internal")

    return handle


def create_app(bench: Workbench, registry: CollectorRegistry | None = None) -> ASGIApp:
    """The pages, their JSON API and health, over `bench`; every reply with the security headers. With
    `registry`: Prometheus' `/metrics` of the process (no token: it names no person and no content)."""

    async def person(request: Request) -> Person:
        return await run_in_threadpool(bench.sign_in, bearer(request))

    @guarded
    async def me(request: Request) -> Response:
        who = await person(request)
        return JSONResponse({"name": who.name, "admin": who.admin})

    @guarded
    async def next_task(request: Request) -> Response:
        who = await person(request)
        task = await run_in_threadpool(bench.next_task, who)
        if task is not None:
            return JSONResponse({"task": task_json(task), "withheld": 0})
        return JSONResponse({"task": None, "withheld": await run_in_threadpool(bench.withheld, who)})

    @guarded
    async def annotation(request: Request) -> Response:
        who = await person(request)
        task_id = request.path_params["task_id"]
        if not TASK_ID.match(task_id):
            raise InvalidForm(f"task id {task_id[:80]!r} is malformed (64 hex digits)")
        created = await run_in_threadpool(bench.submit, who, task_id, await read_json(request, MAX_BODY))
        message = "submitted" if created else "already submitted: this annotation is stored once"
        return JSONResponse({"created": created, "message": message})

    @guarded
    async def overview(request: Request) -> Response:
        view = await run_in_threadpool(bench.overview, await person(request))
        rows = [row_json(r, bench.clock()) for r in view.annotators]
        counts = {
            "open_tasks": view.open_tasks,
            "free_tasks": view.free_tasks,
            "unfinishable": asdict(view.unfinishable),
        }
        filtered = {"counts": view.rule_filtered, "newest": [filtered_json(f) for f in view.filtered]}
        return JSONResponse(
            {"annotators": rows, **counts, "doubles": doubles_json(view.doubles), "rule_filtered": filtered}
        )

    async def health(request: Request) -> Response:
        try:
            await run_in_threadpool(store_answers, bench)
        except Exception as e:
            return JSONResponse({"status": "not_serving", "error": type(e).__name__}, status_code=503)
        return JSONResponse({"status": "serving"})

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        reason = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
        return json_error(status, f"{request.method} {request.url.path}: {detail}", reason)

    routes = [
        Route("/", lambda request: RedirectResponse("/annotate")),
        Route("/annotate", pages.annotator_page),
        Route("/admin", pages.admin_page),
        Route("/health", health),
        Route("/api/me", me),
        Route("/api/tasks/next", next_task),
        Route("/api/tasks/{task_id}/annotation", annotation, methods=["POST"]),
        Route("/api/overview", overview),
        static_mount(),
        Mount("/static/annotation", app=pages.static_files(), name="static-annotation"),
        *([Route("/metrics", metrics_app(registry))] if registry is not None else []),
    ]
    return SecureHeaders(
        instrumented(Starlette(routes=routes, exception_handlers={HTTPException: not_found}), registry)
    )


def store_answers(bench: Workbench) -> None:
    with bench.service.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
