"""The page shell every service's pages share, and the route serving a package's static files.

    html = layout("排行榜", body_html, lang, scripts=["/static/web/page.js"], nav=[("/", "首页")])
    app = Starlette(routes=[..., static_mount()])     # serves static/ of this package at /static/web

The CSS and the scripts are files under a static mount (`/static/web/style.css`: every app serving these pages
mounts `static_mount()`), never inline: the pages' Content-Security-Policy (services.web.headers) allows
only files of the same origin. Nothing is loaded from another host.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from services.web.html import escape
from services.web.i18n import LANGS

STATIC = Path(__file__).resolve().parent / "static"
STYLESHEET = "/static/web/style.css"  # under static_mount()'s default path
LANGUAGE_NAMES = {"zh": "中文", "en": "English"}


def language_switch(lang: str) -> str:
    """Links to the same page in each language; the current one is marked, not linked."""
    links = []
    for code in LANGS:
        name = LANGUAGE_NAMES[code]
        if code == lang:
            links.append(f'<span class="current" lang="{code}">{name}</span>')
        else:
            links.append(f'<a href="?lang={code}" lang="{code}" data-lang="{code}">{name}</a>')
    return f'<nav class="langs">{" | ".join(links)}</nav>'


def layout(
    title: str,
    body_html: str,
    lang: str,
    *,
    scripts: Sequence[str] = (),
    nav: Sequence[tuple[str, str]] = (),
    head_html: str = "",
) -> str:
    """A whole HTML document: `title` (text, escaped here), `body_html` (HTML, put as is) in <main>, `nav`
    [(href, label)] links in the header, the language switch, and `scripts` (URLs) at the end of <body>."""
    html_lang = "zh-CN" if lang == "zh" else "en"
    links = "".join(f'<a href="{escape(href)}">{escape(label)}</a>' for href, label in nav)
    tags = "".join(f'<script src="{escape(src)}"></script>' for src in scripts)
    return (
        f'<!DOCTYPE html>\n<html lang="{html_lang}"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{escape(title)} · Cheems</title><link rel="stylesheet" href="{STYLESHEET}">{head_html}</head>'
        f'<body><header class="top"><span class="brand">Cheems</span><h1>{escape(title)}</h1>'
        f'<nav class="links">{links}</nav>{language_switch(lang)}</header>'
        f"<main>{body_html}</main>{tags}</body></html>\n"
    )


def static_mount(path: str = "/static/web", directory: Path = STATIC) -> Mount:
    """A Starlette route serving the files of `directory` under `path` (a package's static/ folder)."""
    return Mount(path, app=StaticFiles(directory=directory), name=path.strip("/").replace("/", "-"))
