"""The security headers every HTTP response of every page server carries: one middleware, around the whole app.

    app = SecureHeaders(Starlette(routes=...))   # the leaderboard, the annotator's page, the scorer's HTTP API

The pages load nothing from another host and run no inline code: scripts and stylesheets are files under the
app's own static mounts, data for a script is a `<script type="application/json">` block (data, not code), and
the chart is an image from the same origin. So the policy allows only 'self', forbids framing (clickjacking:
frame-ancestors 'none' and X-Frame-Options for older browsers), and sends no Referer (a URL may carry a model
id or a `?token=`). Wrapping the app from outside, rather than as a Starlette middleware, covers every reply,
the 500s of Starlette's error middleware included. A header the app set itself is kept.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    )
)
HEADERS: dict[str, str] = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}
RAW = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in HEADERS.items()]


class SecureHeaders:
    """ASGI middleware adding `HEADERS` to every HTTP response of `app`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(name, value) for name, value in RAW if name not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
