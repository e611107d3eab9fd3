"""Promote and roll back from the leaderboard's API: for an admin's token only.

    POST /api/models/{model_id}/promote   {"reason"?: str, "force"?: bool}
    POST /api/rollback                    {"reason"?: str}
    Authorization: Bearer TOKEN           the token of an admin account (`cheems accounts add NAME --role admin`)
    -> {"changes": [{model_id, action, from_state, to_state, actor, reason}], "production": model id | null}

The caller is checked before anything else, the URL and the body included (a stranger's body is never read):
401 without a token or with one no active account has, 403 for an account that is not an admin, 400 a body
that is not a JSON object of those fields (the message names the field), 404 an unknown model, 409 a rejected
or retired model without `force`, or nothing to roll back to. Each step is recorded as `person:NAME` and
announced on cheems.models.v1 as `cheems models promote|rollback` announces it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cheems.roles import DECIDE, spelled
from evaluator.errors import BadRequest
from services.annotation.web.app import bearer
from services.models.lifecycle import ModelLifecycle
from services.store.accounts import AccountBook
from services.store.lifecycle import Change
from services.web import Forbidden, Unauthenticated, read_json

MAX_BODY = 64 * 1024


def admin_of(engine: Engine, request: Request) -> str:
    """`person:NAME` of the admin whose bearer token the request carries."""
    token = bearer(request)
    if token is None:
        raise Unauthenticated("an admin's token is needed: Authorization: Bearer TOKEN")
    who = AccountBook(engine)(token)
    if who is None:
        raise Unauthenticated("no active account has this token")
    if who.role not in DECIDE:
        raise Forbidden(f"promoting and rolling back models needs the role {spelled(DECIDE)}; {who.name} is {who.role}")
    return who.actor  # person:NAME: only people hold the admin role


async def body_of(request: Request) -> dict[str, Any]:
    """The JSON object of the request ({} for an empty body), its fields checked."""
    body = await read_json(request, MAX_BODY, empty={})
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object")
    if not isinstance(body.get("reason", ""), str) or "\x00" in body.get("reason", ""):
        raise BadRequest("reason: expected text")
    if not isinstance(body.get("force", False), bool):
        raise BadRequest("force: expected true or false")
    return body


def changes_json(changes: list[Change], lifecycle: ModelLifecycle) -> dict[str, Any]:
    production = lifecycle.production()
    fields = ("model_id", "action", "from_state", "to_state", "actor", "reason")
    return {
        "changes": [{name: getattr(c, name) for name in fields} for c in changes],
        "production": production.id if production else None,
    }


def admin_routes(engine: Engine, model_id_of: Any) -> list[Route]:
    """The routes above; `model_id_of` checks a model id taken from the URL."""
    lifecycle = ModelLifecycle(engine)

    async def promote(request: Request) -> Response:
        actor = await run_in_threadpool(admin_of, engine, request)  # the caller first: no body read for a stranger
        model_id = model_id_of(request.path_params["model_id"])
        body = await body_of(request)
        reason, force = body.get("reason", ""), body.get("force", False)
        changes = await run_in_threadpool(lifecycle.promote, model_id, actor, reason, force)
        return JSONResponse(await run_in_threadpool(changes_json, changes, lifecycle))

    async def rollback(request: Request) -> Response:
        actor = await run_in_threadpool(admin_of, engine, request)
        body = await body_of(request)
        changes = await run_in_threadpool(lifecycle.rollback, actor, body.get("reason", ""))
        return JSONResponse(await run_in_threadpool(changes_json, changes, lifecycle))

    return [
        Route("/api/models/{model_id}/promote", promote, methods=["POST"]),
        Route("/api/rollback", rollback, methods=["POST"]),
    ]
