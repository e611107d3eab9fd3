"""The API key of a vLLM engine the scorer started, checked on every route the engine serves but /health.

vLLM's own `--api-key` (or VLLM_API_KEY) guards only the paths under /v1, /v2, /inference and /cohere (vLLM 0.32,
`entrypoints/serve/middleware/authenticate.py`, and its docs say not to rely on it alone); the routes the scorer
uses, /pooling and /metrics, stay open to anyone who can reach the port. This middleware closes them: the engine
loads it by import path (`--middleware cheems_vllm_keyguard.KeyGuard`), from a private copy of this file the scorer
puts first on the engine's PYTHONPATH (`engine.py`), and reads the key from VLLM_API_KEY, the variable vLLM's own
check reads too (an environment is readable by its owner only; a command line by every local user).

It runs inside vLLM's environment, so it imports the standard library only. A request without
`Authorization: Bearer KEY` gets 401 `{"error": "Unauthorized"}`, as vLLM's own check answers; /health stays open
(readiness probes, as in vLLM). An engine started with the middleware but no key refuses to start.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

KEY_VARIABLE = "VLLM_API_KEY"
OPEN = frozenset({"/health"})
UNAUTHORIZED = b'{"error": "Unauthorized"}'
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def presented(scope: Scope) -> str:
    """The bearer token of the request's Authorization header ("" when it has none)."""
    for name, value in scope.get("headers", []):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return ""


class KeyGuard:
    """ASGI middleware: every HTTP or WebSocket request but one to /health must carry the key."""

    def __init__(self, app: App) -> None:
        key = os.environ.get(KEY_VARIABLE, "")
        if not key:
            raise RuntimeError(f"cheems_vllm_keyguard: {KEY_VARIABLE} is not set; refusing to serve without a key")
        self.app, self._digest = app, digest(key)

    def allowed(self, scope: Scope) -> bool:
        path = scope.get("path", "").removeprefix(scope.get("root_path", ""))
        return path in OPEN or hmac.compare_digest(digest(presented(scope)), self._digest)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(UNAUTHORIZED)).encode())]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": UNAUTHORIZED})
