"""Assemble and run the scorer: backend (Triton or torch), gRPC server, HTTP server, lifecycle.

    server = ScorerServer(ScorerConfig(model="out/train-tiny/model", grpc_port=0, http_port=0)).start()
    ...                      # server.grpc_port, server.http_port
    server.stop()

`serve(config)` runs until SIGTERM/SIGINT, then drains: health turns NOT_SERVING, in-flight calls
get `drain_seconds` to finish, then HTTP, Triton and the process stop.

A `Supervisor` keeps health truthful: readiness follows the backend; a crashed PyTriton-started
Triton is restarted (`triton_restarts` attempts); when that fails liveness turns NOT_SERVING and
`serve` exits with status 1, for the orchestrator to start a new process.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from cheems.errors import PortInUse
from services.scorer.backends import Backend, TorchBackend, TritonBackend
from services.scorer.config import ScorerConfig
from services.scorer.http_app import create_app
from services.scorer.server import create_server, set_alive, set_health
from services.scorer.service import Scorer
from services.scorer.supervisor import RestartPolicy, State, Supervisor
from services.scorer.telemetry import ScorerMetrics
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
        self.failed = threading.Event()  # the backend is gone for good: the process should be replaced
        self.scorer: Scorer | None = None
        self.supervisor: Supervisor | None = None

    def start(self) -> ScorerServer:
        """Load, bind and serve; on any failure (a taken port, say) release what was started, then raise."""
        try:
            return self._start()
        except BaseException:
            self.stop(grace=0)
            raise

    def _start(self) -> ScorerServer:
        from transformers import AutoTokenizer

        config = self.config
        tokenizer = AutoTokenizer.from_pretrained(config.model)
        self.backend = self.backend or self._make_backend()
        name = Path(config.model).name or config.model
        scorer = self.scorer = Scorer(config, self.backend, tokenizer, ScorerMetrics())
        self._grpc, self.grpc_port, self._health = create_server(config, scorer, name)
        self._grpc.start()
        if config.http_port >= 0:
            self._start_http(scorer)
        self.supervisor = self._make_supervisor()
        self.supervisor.step()
        self.supervisor.start()
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
        return TritonBackend(url, config.triton_model_name, config.max_batch_size)

    def _make_supervisor(self) -> Supervisor:
        backend, host = self.backend, self.host
        assert backend is not None
        if host is None:
            return Supervisor(backend.ready, self._publish, interval=self.config.watch_seconds)

        def ready() -> bool:
            host.note_processes()
            return host.alive() and backend.ready()

        def restart() -> None:
            url = host.restart()
            backend.reconnect(url)  # type: ignore[attr-defined]

        return Supervisor(
            ready,
            self._publish,
            restart,
            dead=lambda: not host.alive(),
            policy=RestartPolicy(self.config.triton_restarts),
            interval=self.config.watch_seconds,
        )

    def _publish(self, state: State, why: str) -> None:
        """Health (gRPC and HTTP) and fail-fast calls follow the supervisor."""
        if self._stopped.is_set() or self.scorer is None:
            return
        where = getattr(self.backend, "url", "") or "in process"
        self.scorer.unavailable = "" if state is State.SERVING else f"the model backend ({where}) is not serving: {why}"
        set_health(self._health, serving=state is State.SERVING)
        if state is State.FAILED:
            set_alive(self._health, alive=False)
            self.failed.set()

    def ready(self) -> bool:
        return self.supervisor is not None and self.supervisor.state is State.SERVING

    def _start_http(self, scorer: Scorer) -> None:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.config.host, self.config.http_port))
        except OSError as e:
            sock.close()
            raise PortInUse(f"cannot listen on {self.config.host}:{self.config.http_port} for HTTP: {e}") from None
        sock.listen(2048)  # listening before start() returns: uvicorn's own listen comes later, in its thread
        self.http_port = sock.getsockname()[1]
        app = create_app(scorer, self.ready, self.config.auth_token)
        self._http = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._http_thread = threading.Thread(target=self._http.run, kwargs={"sockets": [sock]}, daemon=True)
        self._http_thread.start()

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls, let in-flight ones finish within `grace` seconds, release everything."""
        if self._stopped.is_set():
            return
        if self.supervisor is not None:
            self.supervisor.stop()
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

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (or `timeout` seconds); True once stopped."""
        return self._stopped.wait(timeout)

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
    http = f"{config.host}:{server.http_port}" if config.http_port >= 0 else "off"
    print(f"serving: gRPC {config.host}:{server.grpc_port}  HTTP {http}", flush=True)
    while not server.wait(0.5):
        if server.failed.is_set():
            log.error("the model backend could not be restarted: stopping, for a fresh process to take over")
            server.stop(config.drain_seconds)
            raise SystemExit(1)
