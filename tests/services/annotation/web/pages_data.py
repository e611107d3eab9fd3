"""Helpers of the annotator page's tests: a store with accounts and tasks, and a JSON client of the HTTP API."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

from services.annotation.service import AnnotationService
from services.store import accounts
from services.store.db import session_scope

RESPONSES = [
    ("r1", "**快速排序**的平均时间复杂度是 $O(n \\log n)$。\n\n```python\ndef qs(a):\n    return sorted(a)\n```"),
    ("r2", "平均 O(n log n)，最坏 O(n^2)。"),
    ("r3", "不知道。"),
]


def add_prompt(
    service: AnnotationService, text: str, responses: list[tuple[str, str]] | None = None, **extra: Any
) -> str:
    """Stores a prompt with its responses and opens its triple-wise tasks; returns the prompt id."""
    fields = {"category": ["代码"], "system_prompt": None, "source": "test", "history": [], **extra}
    prompt_id, _ = service.take_sample(
        "", text, responses or RESPONSES, fields["category"], fields["system_prompt"], fields["source"],
        fields["history"], 3,
    )  # fmt: skip
    return prompt_id


def add_people(service: AnnotationService, *names: str, admin: str = "") -> dict[str, str]:
    """{name: token} of new accounts (`admin`, when given, is an admin)."""
    with session_scope(service.engine) as session:
        tokens = {name: accounts.add_annotator(session, name) for name in names}
        if admin:
            tokens[admin] = accounts.add_annotator(session, admin, admin=True)
    return tokens


class Clock:
    """A clock tests move by hand (the lease of a claimed task)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def call(
    base: str, method: str, path: str, token: str | None = None, body: Any = None, raw: bytes | None = None
) -> tuple[int, Any]:
    """(status, parsed JSON body) of one request; error statuses are returned, not raised."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(base + path, data=data, method=method)
    if token is not None:
        request.add_header("authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        text = e.read().decode()
        assert "Traceback" not in text
        return e.code, json.loads(text)
