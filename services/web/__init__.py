"""Web pages' shared pieces: the page shell, languages, escaping, Markdown, static files and JSON errors.

Used by every service that serves pages (the annotator's page in `services.annotation`, the leaderboard in
`evaluator`); nothing here is loaded from another host, so the pages work on an offline cluster.

    from services.web import layout, Catalog, request_language, escape, render_markdown, static_mount

    layout(title, body_html, lang, *, scripts=(), nav=(), head_html="") -> str
        A whole HTML document: the project's stylesheet (a file under `static_mount()`), a header with the
        title, `nav` links [(href, label)] and a 中文 / English switch (`?lang=`), then `body_html` (already
        safe HTML) in <main>. `scripts` are URLs of scripts loaded at the end of <body> (served by `static_mount`).
    request_language(request) -> "zh" | "en"
        `?lang=` first, then the `lang` cookie, else Chinese. `remember_language(response, lang)` sets the
        cookie, so the choice sticks across pages.
    Catalog({key: (zh, en)}).text(key, lang) / .table(lang) -> {key: text}  (the page's words; `table`
        for handing them to a script as JSON)
    escape(value) -> str             HTML-escapes anything (quotes too: safe in attributes)
    render_markdown(text) -> str     a response as safe HTML: CommonMark with tables and fenced code
        blocks, raw HTML shown as text, no images (nothing loads from another host), `javascript:` links
        refused, math ($...$, $$...$$, \\(...\\), \\[...\\]) left as text in <span class="math">.
    static_mount(path="/static/web", directory=STATIC) -> starlette Mount for a package's static folder
        (this package's: `style.css`, `page.js`; a page package passes its own folder and path).
    json_error(status, message, reason) -> JSONResponse {"error": message, "reason": reason}
    error_response(exc) -> json_error of a CheemsError (its status, str(exc), exc.reason)
    status_of(exc) -> HTTP status of a `cheems.errors` kind (400, 404, 409, 413, 503, 504; else 500), and
        of this package's Unauthenticated (401) and Forbidden (403)
    await read_json(request, limit, empty=REQUIRED) -> the body as JSON; BadBody (400, "body: ...") past
        `limit` bytes or when it is not JSON (invalid UTF-8, malformed, nested too deep)
    SecureHeaders(app) -> the app, every HTTP response of it carrying the Content-Security-Policy ('self'
        only, no framing), X-Frame-Options DENY, Referrer-Policy no-referrer and nosniff; every page server
        (and the scorer's HTTP API) wraps its app in it
    HttpServer(app, host, port).start() -> .port bound (0 = any free); .stop()   uvicorn in a thread,
        beside a service's gRPC server (PortInUse when the port is taken)

CSS classes the shell styles (see static/style.css): .card, .grid-3 (three columns, one on narrow
screens), .scroll (a bounded, scrollable box), .muted, .badge, .notice (.notice.error / .notice.ok),
table.data (numbers right-aligned with td.num), .md (Markdown output), kbd, button / button.primary.
"""

from services.web.body import BadBody, read_json
from services.web.errors import Forbidden, Unauthenticated, error_response, json_error, status_of
from services.web.headers import SecureHeaders
from services.web.html import escape
from services.web.i18n import DEFAULT_LANG, LANGS, Catalog, remember_language, request_language
from services.web.markdown import render_markdown
from services.web.page import STATIC, layout, static_mount
from services.web.serving import HttpServer

__all__ = [
    "DEFAULT_LANG",
    "LANGS",
    "STATIC",
    "BadBody",
    "Catalog",
    "Forbidden",
    "HttpServer",
    "SecureHeaders",
    "Unauthenticated",
    "error_response",
    "escape",
    "json_error",
    "layout",
    "read_json",
    "remember_language",
    "render_markdown",
    "request_language",
    "static_mount",
    "status_of",
]
