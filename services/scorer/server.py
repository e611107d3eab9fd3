"""Assemble and run the scorer: backend (Triton or torch), gRPC server, HTTP server, lifecycle.

    server = ScorerServer(ScorerConfig(model="out/train-tiny/model", grpc_port=0, http_port=0)).start()
    ...                      # server.grpc_port, server.http_port
    server.stop()

`serve(config)` runs until SIGTERM/SIGINT, then drains: health turns NOT_SERVING, in-flight calls
get `drain_seconds` to finish, then HTTP, Triton and the process stop.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from services.scorer.backends import Backend, TorchBackend, TritonBackend
from services.scorer.config import ScorerConfig
from services.scorer.grpc_server import create_server, set_health
from services.scorer.http_app import create_app
from services.scorer.metrics import ScorerMetrics
from services.scorer.service import Scorer
from services.scorer.triton_model import TritonHost

log = logging.getLogger(__name__)


class ScorerServer:
    def __init__(self, config: ScorerConfig, backend: Backend | None = None) -> None:
        """`backend` replaces the one `config.backend` names (benchmarks use an instant one)."""
        self.config = config
        self.grpc_port = 0
        self.http_port = 0
        self.host: TritonHost | None = None
        self.backend: Backend | None = backend
        self._grpc: Any = None
        self._health: Any = None
        self._http: Any = None
        self._http_thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def start(self) -> ScorerServer:
        from transformers import AutoTokenizer

        config = self.config
        tokenizer = AutoTokenizer.from_pretrained(config.model)
        self.backend = self.backend or self._make_backend()
        name = Path(config.model).name or config.model
        scorer = Scorer(config, self.backend, tokenizer, ScorerMetrics())
        self._grpc, self.grpc_port, self._health = create_server(config, scorer, name)
        self._grpc.start()
        if config.http_port >= 0:
            self._start_http(scorer)
        set_health(self._health, serving=self.backend.ready())
        log.info(
            "scorer serving %s: gRPC :%d, HTTP :%d, backend %s",
            name,
            self.grpc_port,
            self.http_port,
            self.backend.name,
        )
        return self

    def _make_backend(self) -> Backend:
        config = self.config
        if config.backend == "torch":
            return TorchBackend(config.model, config.device, config.max_batch_size)
        url = config.triton_url
        if not url:
            self.host = TritonHost(
                config.model,
                config.triton_model_name,
                config.device,
                config.max_batch_size,
                config.queue_delay_us,
            )
            url = self.host.start()
        return TritonBackend(url, config.triton_model_name)

    def _start_http(self, scorer: Scorer) -> None:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.config.host, self.config.http_port))
        self.http_port = sock.getsockname()[1]
        app = create_app(scorer, lambda: bool(self.backend and self.backend.ready()), self.config.auth_token)
        self._http = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._http_thread = threading.Thread(target=self._http.run, kwargs={"sockets": [sock]}, daemon=True)
        self._http_thread.start()

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls, let in-flight ones finish within `grace` seconds, release everything."""
        if self._stopped.is_set():
            return
        if self._health is not None:
            set_health(self._health, serving=False)
        if self._grpc is not None:
            self._grpc.stop(grace).wait()
        if self._http is not None:
            self._http.should_exit = True
            if self._http_thread:
                self._http_thread.join(timeout=10)
        if self.backend is not None:
            self.backend.close()
        if self.host is not None:
            self.host.stop()
        self._stopped.set()

    def wait(self) -> None:
        self._stopped.wait()

    def __enter__(self) -> ScorerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(config: ScorerConfig) -> None:
    """Run until SIGTERM or SIGINT, then drain gracefully."""
    server = ScorerServer(config).start()

    def drain(signum: int, frame: Any) -> None:
        log.info("signal %d: draining for up to %.0f s", signum, config.drain_seconds)
        threading.Thread(target=server.stop, args=(config.drain_seconds,), daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, drain)
    print(f"serving: gRPC {config.host}:{server.grpc_port}  HTTP {config.host}:{server.http_port}", flush=True)
    server.wait()
