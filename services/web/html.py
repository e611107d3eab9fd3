"""HTML escaping: every value that is not already HTML goes through `escape` before it reaches a page."""

from __future__ import annotations

import html


def escape(value: object) -> str:
    """`value` as text safe inside HTML elements and quoted attributes (& < > " ' escaped)."""
    return html.escape(str(value), quote=True)
