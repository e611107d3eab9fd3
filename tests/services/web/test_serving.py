"""HttpServer: an app on a port bound before start() returns; a taken port is PortInUse, not a hang."""

from __future__ import annotations

import json
import urllib.request

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from cheems.errors import PortInUse
from services.web import HttpServer


async def hello(request: Request) -> JSONResponse:
    return JSONResponse({"你好": "世界"})


def test_serves_then_stops_and_refuses_a_taken_port() -> None:
    server = HttpServer(Starlette(routes=[Route("/", hello)]), port=0).start()
    try:
        assert server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=10) as response:
            assert json.loads(response.read()) == {"你好": "世界"}
        with pytest.raises(PortInUse, match=str(server.port)):
            HttpServer(Starlette(), port=server.port).start()
    finally:
        server.stop()
    with pytest.raises(ValueError, match="port"):
        HttpServer(Starlette(), port=70000)
