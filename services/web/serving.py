"""Serving a Starlette app from a service process: uvicorn in a thread beside the gRPC server.

    http = HttpServer(app, host="127.0.0.1", port=8080).start()   # port 0: any free one; http.port is bound
    ...
    http.stop()

The socket is bound and listening before `start()` returns, so a port that is taken fails at once with
PortInUse (like the gRPC ports) and a client may connect as soon as the port is announced.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

import uvicorn

from cheems.errors import PortInUse

log = logging.getLogger(__name__)


class HttpServer:
    """One ASGI app on (host, port) in a daemon thread."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
        self.app, self.host, self.port = app, host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def start(self) -> HttpServer:
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as e:
            sock.close()
            raise PortInUse(f"cannot listen on {self.host}:{self.port} for HTTP: {e}") from None
        sock.listen(1024)
        self._sock, self.port = sock, sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", access_log=False, log_config=None)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="http")
        self._thread.start()
        log.info("HTTP on %s:%d", self.host, self.port)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let open requests finish (up to `timeout` seconds), close the socket."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None
