"""Languages of the pages: Chinese by default, English on request (`?lang=en`, remembered in a cookie).

words = Catalog({"submit": ("提交", "Submit")})
lang = request_language(request)
words.text("submit", lang)   # "提交" or "Submit"
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import Response

LANGS = ("zh", "en")
DEFAULT_LANG = "zh"
COOKIE = "lang"


def pick_language(query: str | None, cookie: str | None) -> str:
    """The first of the query's and the cookie's value that is a known language, else Chinese."""
    for value in (query, cookie):
        if value in LANGS:
            return value
    return DEFAULT_LANG


def request_language(request: Request) -> str:
    """The language a request asks for: `?lang=` first, then the `lang` cookie, else Chinese."""
    return pick_language(request.query_params.get("lang"), request.cookies.get(COOKIE))


def remember_language(response: Response, lang: str) -> Response:
    """Sets the `lang` cookie (a year, this site only) so later pages keep the language; returns `response`."""
    if lang in LANGS:
        response.set_cookie(COOKIE, lang, max_age=365 * 24 * 3600, samesite="lax")
    return response


class Catalog:
    """A page's words in each language: {key: (Chinese, English)}."""

    def __init__(self, entries: Mapping[str, tuple[str, str]]) -> None:
        self.entries = dict(entries)

    def text(self, key: str, lang: str) -> str:
        """The word for `key` in `lang` (Chinese for an unknown language); a missing key is a KeyError."""
        zh, en = self.entries[key]
        return en if lang == "en" else zh

    def table(self, lang: str) -> dict[str, str]:
        """Every word in `lang`, for a page's script (as JSON)."""
        return {key: self.text(key, lang) for key in self.entries}

    def merged(self, other: Catalog) -> Catalog:
        """A catalog with both sets of words (`other` wins on a shared key)."""
        return Catalog({**self.entries, **other.entries})
