"""Promote and roll back through the leaderboard's API (SQLite and PostgreSQL, served by uvicorn): an admin's token
only, every refusal a JSON 4xx naming why, and each step recorded under the admin's name."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine

from evaluator.leaderboard.admin import MAX_BODY
from evaluator.leaderboard.app import create_app
from services.store import lifecycle
from services.store.accounts import add_annotator
from services.store.db import session_scope
from tests.web.conftest import serve_asgi


@pytest.fixture
def site(engine: Engine) -> Iterator[dict[str, str]]:
    with session_scope(engine) as session:
        tokens = {"admin": add_annotator(session, "组长", admin=True), "annotator": add_annotator(session, "张三")}
        for model_id in ("rm-a", "rm-b", "rm-c"):
            lifecycle.register_checkpoint(session, f"/models/{model_id}", model_id, "person:ann")
        lifecycle.reject(session, "rm-c", "policy:auto", "Overall fell")
    with serve_asgi(create_app(engine)) as base:
        yield {"base": base, **tokens}


def post(site: dict[str, str], path: str, body: Any = None, token: str = "", raw: bytes | None = None) -> tuple:
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(site["base"] + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_only_an_admin_promotes_and_rolls_back(site: dict[str, str], engine: Engine) -> None:
    admin = site["admin"]
    for token, status in [("", 401), ("chm_nobody", 401), (site["annotator"], 403)]:
        code, reply = post(site, "/api/models/rm-a/promote", {}, token)
        assert code == status and reply["reason"] in ("unauthenticated", "forbidden"), reply
    for raw, field in [(b"{not json", "body"), (b"[1, 2]", "body"), (b'{"force": "yes"}', "force"),
                       (b'{"reason": 5}', "reason"), (b"\xff\xfe", "body"), (b"[" * 5000, "body")]:  # fmt: skip
        code, reply = post(site, "/api/models/rm-a/promote", token=admin, raw=raw)
        assert code == 400 and reply["error"].startswith(f"{field}:"), (raw[:20], reply)
    code, reply = post(site, "/api/models/rm-nobody/promote", {}, admin)
    assert code == 404 and "rm-nobody" in reply["error"]
    code, reply = post(site, "/api/rollback", {}, admin)
    assert code == 409 and "nothing to roll back" in reply["error"]

    code, reply = post(site, "/api/models/rm-a/promote", {"reason": "checked by hand"}, admin)
    assert code == 200 and reply["production"] == "rm-a"
    step = {"model_id": "rm-a", "action": "promoted", "from_state": "candidate", "to_state": "production"}
    assert reply["changes"] == [{**step, "actor": "person:组长", "reason": "checked by hand"}]
    assert post(site, "/api/models/rm-b/promote", None, admin)[1]["production"] == "rm-b"
    code, reply = post(site, "/api/rollback", {"reason": "rewards drifted"}, admin)
    assert code == 200 and reply["production"] == "rm-a" and reply["changes"][-1]["reason"] == "rewards drifted"
    code, reply = post(site, "/api/models/rm-c/promote", {}, admin)
    assert code == 409 and "force" in reply["error"]
    assert post(site, "/api/models/rm-c/promote", {"force": True}, admin)[1]["production"] == "rm-c"
    with session_scope(engine) as session:
        actors = {t.actor for t in lifecycle.transitions(session) if t.action in ("promoted", "rolled_back")}
    assert actors == {"person:组长"}


@pytest.mark.parametrize("path", ["/api/models/rm-a/promote", "/api/models/bad%20id!/promote", "/api/rollback"])
def test_the_caller_is_checked_before_the_body_is_read(site: dict[str, str], path: str) -> None:
    """A stranger's or an annotator's body is never parsed: invalid JSON, a wrong field or one over the limit
    gets 401 / 403, not 400 or 413, and promotes nothing."""
    bodies = [b"{not json", b'{"force": "yes"}', b"\xff\xfe", b"[" * 5000, b"x" * (MAX_BODY + 1)]
    for token, status, reason in [("", 401, "unauthenticated"), ("chm_nobody", 401, "unauthenticated"),
                                  (site["annotator"], 403, "forbidden")]:  # fmt: skip
        for raw in bodies:
            code, reply = post(site, path, token=token, raw=raw)
            assert (code, reply["reason"]) == (status, reason), (path, token[:6], raw[:12], reply)
    code, reply = post(site, "/api/models/rm-a/promote", token=site["admin"], raw=b"x" * (MAX_BODY + 1))
    assert code == 400 and reply["error"].startswith("body:")  # an admin's oversized body is still refused
