"""Request bodies of the pages' JSON APIs: read within a limit, parsed as JSON, refused with a 400 naming `body`.

data = await read_json(request, 64 * 1024)             # an empty body is "not JSON"
data = await read_json(request, 64 * 1024, empty={})   # an empty body is {}
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import ClientDisconnect, Request

from cheems import errors

REQUIRED: Any = object()


class BadBody(errors.InvalidInput):
    """A body over the limit, or not JSON: invalid UTF-8, malformed, nested past Python's recursion limit."""


async def read_json(request: Request, limit: int, empty: Any = REQUIRED) -> Any:
    """The body parsed as JSON; read chunk by chunk, refused as soon as it passes `limit` bytes."""
    data = bytearray()
    try:
        async for chunk in request.stream():
            data += chunk
            if len(data) > limit:
                raise BadBody(f"body: over {limit} bytes")
    except ClientDisconnect:
        raise errors.Cancelled("the caller went away while sending the body") from None
    if empty is not REQUIRED and not data.strip():
        return empty
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadBody(f"body: not JSON ({type(e).__name__})") from None
