"""HTTP adapter (Starlette, run by uvicorn): OpenRLHF's remote-RM endpoint, a JSON Score, health, metrics.

POST /get_reward  {"query": [prompt+response text, ...], "prompts"?: [...], "labels"?: [...]}
                  -> {"rewards": [float], "scores": [float] (the same values),
                      "extra_logs": {"query_tokens": [int], "truncated": [0 | 1]}}   one entry per query
POST /score       {"prompt", "responses", "system_prompt"?, "history"?: [[role, content]]}
                  -> {"scores", "best_index", "truncated", "timings", "model" (the id of the model that scored)}
Both take `"model"` in the body, or `?model=` (for clients whose body is fixed, OpenRLHF's): a model id or
an alias; absent = the default model. An unknown, rejected or retired one is 404 `model_not_found`.
GET  /health      200 when the model is ready, else 503 (no token needed)
GET  /metrics     Prometheus text (no token needed)

Errors are JSON, `{"error": message, "reason": word}` (the word is the scorer error's `reason`), with
the status of `services.web.STATUSES`: 400 bad input (the message names the field: `query[3]: lone surrogate`),
413 over a limit (`max_message_bytes`, `max_queries`, length under truncation "error"), 503 backend
down, 504 deadline (every call gets the server's `max_call_seconds`), 499 caller gone, 401 no token, 403 an account
whose role does not score.

Bodies over `max_message_bytes` are refused before they are read (Content-Length) or as soon as they
pass the limit (chunked). JSON is parsed in the threadpool by `parse_body`, one array element at a
time: one C call of `json` per element, never one for the whole body, so the parsing thread lets go
of the GIL between elements and small requests keep flowing while a 50 MB body is parsed.

With a token set (`ScorerConfig.token`) or the store's accounts taken (`--accounts`, `server.callers`),
POST endpoints take `authorization: Bearer <token>` or `?token=<token>` (for
OpenRLHF, whose client sends no headers: `--remote_rm_url http://scorer:8000/get_reward?token=...`).
Every reply carries the pages' security headers (services.web.headers: no framing, no Referer, nosniff).
The token is taken out of the query string before anything (uvicorn's access log included) sees it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import unquote_to_bytes

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from cheems import errors
from services.access import Authenticate, bearer_of, check
from services.grpc_errors import status_of
from services.observe.http import instrumented
from services.scorer.errors import (
    InvalidRequest,
    LimitExceeded,
    ScorerError,
)
from services.scorer.http.body import parse_body, read_body
from services.scorer.service import ScoreArgs, Scorer
from services.web.errors import status_of as http_status
from services.web.headers import SecureHeaders

log = logging.getLogger(__name__)
VALUES_PER_QUERY = 64  # JSON values a body may hold per allowed query: bounds the parse's CPU time
SCORE = "/cheems.v1.RewardService/Score"
TOKEN_KEY = "cheems.query_token"  # scope key for the `?token=` value, once moved out of the query string


def error_reply(e: errors.CheemsError) -> tuple[JSONResponse, str]:
    """The JSON reply of an error and its gRPC status name (the metrics' label)."""
    status = http_status(e)
    name = status_of(e).name
    message = str(e).encode("utf-8", "backslashreplace").decode()  # a message may quote a lone surrogate
    return JSONResponse({"error": message, "reason": e.reason}, status_code=status), name


# --- validation of what will be scored


def checked_text(value: Any, where: str) -> str:
    """`value` if it is a string of valid Unicode; a lone surrogate (`"\\ud800"`) cannot be tokenized."""
    if not isinstance(value, str):
        raise InvalidRequest(f"{where} must be a string")
    try:
        value.encode("utf-8", errors="strict")
    except UnicodeEncodeError as e:
        raise InvalidRequest(f"{where}: lone surrogate \\u{ord(value[e.start]):04x} at character {e.start}") from None
    return value


def checked_texts(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise InvalidRequest(f"{where} must be a list of strings")
    return [checked_text(v, f"{where}[{i}]") for i, v in enumerate(value)]


def queries(body: dict[str, Any], max_queries: int) -> list[str]:
    """`query`, checked; `prompts` and `labels`, when given, must match it in length."""
    query = body.get("query")
    if isinstance(query, list) and len(query) > max_queries:
        raise LimitExceeded(f"{len(query)} queries exceed the limit of {max_queries} per call (max_queries)")
    checked = checked_texts(query, "query")
    if not checked:
        raise InvalidRequest("query is empty")
    for key in ("prompts", "labels"):
        other = body.get(key)
        if other is not None and (not isinstance(other, list) or len(other) != len(checked)):
            size = f"{len(other)} items" if isinstance(other, list) else "not a list"
            raise InvalidRequest(f"{key} must be a list as long as query ({len(checked)} items), got {size}")
    return checked


def prompts_of(body: dict[str, Any]) -> list[str] | None:
    """OpenRLHF's `prompts` beside `query` (checked by `queries`), when they are all texts; else None."""
    prompts = body.get("prompts")
    if isinstance(prompts, list) and all(isinstance(p, str) for p in prompts):
        return prompts
    return None


def model_name(body: dict[str, Any], param: str) -> str:
    """The model a call names: `"model"` in the JSON body, else `?model=`; "" = the default model."""
    if "model" in body and body["model"] is not None:
        return checked_text(body["model"], "model")
    return param


def score_args(body: dict[str, Any]) -> ScoreArgs:
    history = body.get("history") or []
    if not isinstance(history, list) or not all(isinstance(t, list) and len(t) == 2 for t in history):
        raise InvalidRequest("history must be a list of [role, content] pairs")
    system_prompt = body.get("system_prompt")
    return ScoreArgs(
        checked_text(body.get("prompt"), "prompt"),
        checked_texts(body.get("responses"), "responses"),
        "" if system_prompt is None else checked_text(system_prompt, "system_prompt"),
        [
            (checked_text(r, f"history[{i}].role"), checked_text(c, f"history[{i}].content"))
            for i, (r, c) in enumerate(history)
        ],
    )


# --- auth


class QueryToken:
    """ASGI middleware: moves `token=` out of the query string into the scope, so no log shows it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and b"token=" in scope.get("query_string", b""):
            kept = []
            for part in scope["query_string"].split(b"&"):
                name, _, value = part.partition(b"=")
                if name == b"token":
                    scope.setdefault(TOKEN_KEY, unquote_to_bytes(value.replace(b"+", b" ")))
                else:
                    kept.append(part)
            scope["query_string"] = b"&".join(kept)
        await self.app(scope, receive, send)


def credentials(request: Request) -> list[str]:
    """The tokens a request offers: the bearer header's, then `?token=`'s."""
    query = request.scope.get(TOKEN_KEY, b"").decode("utf-8", "replace")
    return [t for t in (bearer_of(request.headers.get("authorization", "")), query) if t]


def refusal(authenticate: Authenticate, request: Request) -> errors.CheemsError | None:
    """None when one of the request's tokens may score; else why not (401, or 403 naming the role needed)."""
    denied: errors.CheemsError = errors.Unauthenticated("missing or wrong token (bearer header or ?token=)")
    for token in credentials(request):
        try:
            check(authenticate, token, SCORE)  # an HTTP call scores, as far as roles go
            return None
        except errors.PermissionDenied as e:
            denied = e
        except errors.Unauthenticated:
            pass
    return denied


def create_app(scorer: Scorer, is_ready: Callable[[], bool], authenticate: Authenticate | None = None) -> ASGIApp:
    """The HTTP app; limits come from `scorer.config`; `authenticate`: how tokens are checked (None: not asked)."""
    config, metrics = scorer.config, scorer.metrics
    max_values = VALUES_PER_QUERY * config.max_queries

    def endpoint(
        api: str, handler: Callable[[dict[str, Any], str], tuple[dict[str, Any], str]]
    ) -> Callable[[Request], Any]:
        def parse_and_handle(data: bytearray, model: str) -> tuple[dict[str, Any], str]:
            return handler(parse_body(data, max_values), model)

        async def run(request: Request) -> Response:
            denied = None if authenticate is None else await run_in_threadpool(refusal, authenticate, request)
            if denied is not None:
                refused, status = error_reply(denied)
                metrics.count(api, status)
                return refused
            started = time.perf_counter()
            model_id, seconds = "", None
            try:
                data = await read_body(request, config.max_message_bytes)
                model = request.query_params.get("model", "")  # ?model= for clients that cannot change the body
                reply, model_id = await run_in_threadpool(parse_and_handle, data, model)
                response = JSONResponse(reply)
            except ScorerError as e:
                response, status = error_reply(e)
                log.info("HTTP %s -> %d %s: %s", api, response.status_code, e.reason, e)
            except Exception:  # a bug, not the caller's fault: JSON all the same, and the traceback in the log
                log.exception("HTTP %s failed", api)
                response, status = error_reply(ScorerError("internal error"))
            else:
                status, seconds = "OK", time.perf_counter() - started
            metrics.count(api, status, model_id, seconds)
            return response

        return run

    def get_reward(body: dict[str, Any], model: str) -> tuple[dict[str, Any], str]:
        name = model_name(body, model)
        texts = queries(body, config.max_queries)
        result = scorer.score_queries(texts, scorer.deadline(None), name, prompts_of(body))
        extra_logs = {"query_tokens": result.query_tokens, "truncated": [int(t) for t in result.truncated]}
        return {"rewards": result.rewards, "scores": result.rewards, "extra_logs": extra_logs}, result.model

    def score(body: dict[str, Any], model: str) -> tuple[dict[str, Any], str]:
        s = scorer.score(replace(score_args(body), model=model_name(body, model)), scorer.deadline(None))
        reply = {
            "scores": s.scores,
            "best_index": s.best_index,
            "truncated": s.truncated,
            "timings": {"queue_ms": s.queue_ms, "inference_ms": s.inference_ms, "total_ms": s.total_ms},
            "model": s.model,
        }
        return reply, s.model

    async def health_check(request: Request) -> Response:
        ready = is_ready()
        return JSONResponse({"status": "SERVING" if ready else "NOT_SERVING"}, status_code=200 if ready else 503)

    async def metrics_text(request: Request) -> Response:
        if not metrics.enabled:
            return PlainTextResponse("metrics are off (--no-metrics)\n", status_code=404)
        # in a worker thread: the scrape reads the engines' metrics and the store (the reward watch's bench)
        return Response(await run_in_threadpool(metrics.render), media_type=CONTENT_TYPE_PLAIN_0_0_4)

    app = Starlette(
        routes=[
            Route("/get_reward", endpoint("GetReward", get_reward), methods=["POST"]),
            Route("/score", endpoint("Score", score), methods=["POST"]),
            Route("/health", health_check, methods=["GET"]),
            Route("/metrics", metrics_text, methods=["GET"]),
        ]
    )
    return SecureHeaders(QueryToken(instrumented(app, metrics.registry if metrics.enabled else None)))
