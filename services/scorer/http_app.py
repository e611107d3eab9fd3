"""HTTP adapter (Starlette, run by uvicorn): OpenRLHF's remote-RM endpoint, a JSON Score, health, metrics.

POST /get_reward  {"query": [prompt+response text, ...], "prompts": [...], "labels": [...]}
                  -> {"rewards": [...], "scores": [...], "extra_logs": {"query_tokens": [...]}}
POST /score       {"prompt", "responses", "system_prompt"?, "history"?: [[role, content]]}
                  -> {"scores", "best_index", "truncated", "timings"}
GET  /health      200 when the model is ready, else 503
GET  /metrics     Prometheus text
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.scorer.errors import (
    BackendUnavailable,
    DeadlineExceeded,
    InvalidRequest,
    LimitExceeded,
    ScorerError,
)
from services.scorer.service import ScoreArgs, Scorer

HTTP_STATUS = [
    (InvalidRequest, 400),
    (LimitExceeded, 413),
    (BackendUnavailable, 503),
    (DeadlineExceeded, 504),
    (ScorerError, 500),
]


def _error(e: ScorerError) -> JSONResponse:
    code = next(status for kind, status in HTTP_STATUS if isinstance(e, kind))
    return JSONResponse({"error": str(e)}, status_code=code)


async def _json_object(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InvalidRequest(f"body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("body must be a JSON object")
    return body


def _strings(body: dict[str, Any], key: str, required: bool = True) -> list[str]:
    value = body.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(f"{key} must be a list of strings")
    return value


def create_app(scorer: Scorer, is_ready: Callable[[], bool], auth_token: str = "") -> Starlette:
    def authorized(request: Request) -> bool:
        return not auth_token or request.headers.get("authorization") == f"Bearer {auth_token}"

    def endpoint(handler: Callable[[dict[str, Any]], Any]) -> Callable[[Request], Any]:
        async def run(request: Request) -> Response:
            if not authorized(request):
                return JSONResponse({"error": "missing or wrong bearer token"}, status_code=401)
            try:
                body = await _json_object(request)
                return JSONResponse(await run_in_threadpool(handler, body))
            except ScorerError as e:
                return _error(e)

        return run

    def get_reward(body: dict[str, Any]) -> dict[str, Any]:
        queries = _strings(body, "query")
        if not queries:
            raise InvalidRequest("query is empty")
        result = scorer.score_queries(queries)
        rewards = result.rewards
        return {"rewards": rewards, "scores": rewards, "extra_logs": {"query_tokens": result.query_tokens}}

    def score(body: dict[str, Any]) -> dict[str, Any]:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise InvalidRequest("prompt must be a string")
        history = body.get("history") or []
        if not isinstance(history, list) or not all(isinstance(t, list) and len(t) == 2 for t in history):
            raise InvalidRequest("history must be a list of [role, content] pairs")
        s = scorer.score(
            ScoreArgs(
                prompt,
                _strings(body, "responses"),
                str(body.get("system_prompt") or ""),
                [(str(r), str(c)) for r, c in history],
            )
        )
        return {
            "scores": s.scores,
            "best_index": s.best_index,
            "truncated": s.truncated,
            "timings": {"queue_ms": s.queue_ms, "inference_ms": s.inference_ms, "total_ms": s.total_ms},
        }

    async def health_check(request: Request) -> Response:
        ready = is_ready()
        return JSONResponse({"status": "SERVING" if ready else "NOT_SERVING"}, status_code=200 if ready else 503)

    async def metrics(request: Request) -> Response:
        return Response(scorer.metrics.render(), media_type="text/plain; version=0.0.4")

    return Starlette(
        routes=[
            Route("/get_reward", endpoint(get_reward), methods=["POST"]),
            Route("/score", endpoint(score), methods=["POST"]),
            Route("/health", health_check, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )
