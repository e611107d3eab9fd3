"""Browser tests in a real Chromium: Debian's `chromium` (installed by `make setup`) driven by Playwright.

The fixtures live in tests/web/browser.py and are registered once, for every test folder, by tests/conftest.py
(one registration: two would start two Playwright instances in one process, which Playwright refuses). So page
tests live where the tree puts them (tests/services/annotation/, tests/evaluator/) and just name them:

    browser                    one headless Chromium per test session (per xdist worker)
    page                       a fresh page (own context: no cookies shared) per test, 1280x900, 10 s
                               timeouts; a request to any host but this machine is refused and fails the
                               test at teardown (pages must work on an offline cluster), and so does an
                               uncaught error in the page's scripts or anything the page's
                               Content-Security-Policy refuses (inline styles or scripts)
    screenshot(page, name)     saves out/screenshots/NAME.png (whole page) and returns its path

Plain helper (import it: `from tests.web.conftest import serve_asgi`, or from tests.web.browser):

    with serve_asgi(app) as base_url: ...   # uvicorn in a thread on 127.0.0.1, port 0

Playwright never downloads a browser here: the system Chromium is passed as `executable_path`
(override with CHEEMS_CHROMIUM). A missing Chromium fails the tests; it never skips them.
"""

from tests.web.browser import serve_asgi

__all__ = ["serve_asgi"]
