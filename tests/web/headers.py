"""Checks every page server's replies share: the security headers (services.web.headers) and no inline code.

assert_secure(reply_headers, "GET /")        # the four headers, with the policy's key directives
inline_code(html) -> [what]                  # inline <style>/<script>, style= or on...= attributes
fetch(url, method="GET", body=None, token="") -> (status, headers, body text), 4xx and 5xx included
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Mapping

DIRECTIVES = ("default-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'self'")
INLINE = re.compile(
    r"<style\b|<script(?![^>]*\b(?:src=|type=\"application/json\"))[^>]*>|\sstyle\s*=|\son[a-z]+\s*=", re.IGNORECASE
)


def assert_secure(headers: Mapping[str, str], where: str) -> None:
    policy = headers.get("content-security-policy") or ""
    assert all(d in policy for d in DIRECTIVES), f"{where}: Content-Security-Policy {policy!r}"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, f"{where}: {policy!r}"
    assert headers.get("x-frame-options") == "DENY", f"{where}: X-Frame-Options"
    assert headers.get("referrer-policy") == "no-referrer", f"{where}: Referrer-Policy"
    assert headers.get("x-content-type-options") == "nosniff", f"{where}: X-Content-Type-Options"


def inline_code(html: str) -> list[str]:
    """What in `html` a policy without 'unsafe-inline' would block."""
    return [m.group(0) for m in INLINE.finditer(html)]


def fetch(url: str, method: str = "GET", body: bytes | None = None, token: str = "") -> tuple[int, dict, str]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, {k.lower(): v for k, v in reply.headers.items()}, reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()
