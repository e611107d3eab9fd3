"""The browser fixtures and helpers (see tests/web/conftest.py for how they are registered and used)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import uvicorn

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "out" / "screenshots"
CHROMIUM = os.environ.get("CHEEMS_CHROMIUM", "/usr/bin/chromium")
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless system Chromium, shared by the session's tests."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: `make setup` installs Debian's chromium")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A new page in its own context; requests to other hosts, and anything the page's Content-Security-Policy
    refuses (an inline style or script), fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="zh-CN")
    context.set_default_timeout(10_000)
    foreign: list[str] = []

    def guard(route: Any) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOCAL_HOSTS:
            foreign.append(url)
            route.abort()
        else:
            route.continue_()

    context.route("**/*", guard)
    opened = context.new_page()
    script_errors: list[str] = []
    opened.on("pageerror", lambda error: script_errors.append(str(error)))
    refused: list[str] = []  # what the Content-Security-Policy blocked: an inline style or script broke a page
    opened.on("console", lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None)
    yield opened
    context.close()
    assert foreign == [], f"the page asked another host for {foreign}"
    assert script_errors == [], f"the page's scripts failed: {script_errors}"
    assert refused == [], f"the page's Content-Security-Policy refused: {refused}"


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    """screenshot(page, name) -> out/screenshots/NAME.png, the whole page."""

    def take(page: Any, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """Runs `app` with uvicorn in a thread on 127.0.0.1 (a free port); yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", log_config=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
