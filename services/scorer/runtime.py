"""Assemble and run the scorer: backend (Triton or torch), gRPC server, HTTP server, lifecycle.

    server = ScorerServer(ScorerConfig(model="out/train-tiny/model", grpc_port=0, http_port=0)).start()
    ...                      # server.grpc_port, server.http_port
    server.stop()

`serve(config, on_serving)` runs until SIGTERM/SIGINT, then drains: health turns NOT_SERVING, in-flight calls
get `drain_seconds` to finish, then HTTP, Triton and the process stop.

A `Supervisor` keeps health truthful: readiness follows the backend; a crashed PyTriton-started
Triton is restarted (`triton_restarts` attempts); when that fails liveness turns NOT_SERVING and
`serve` exits with status 1, for the orchestrator to start a new process.

With `follow`, the first model is `--model` or the registry's production model (none yet: ready, calls
naming a model served, the others UNAVAILABLE), a `Follower` switches to each model promoted later, and a
`ModelShelf` serves the models calls name; the supervisor always watches the default model.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

from cheems.errors import PortInUse
from services.access import Authenticate
from services.bus.topics import MODELS
from services.observe.metrics import add_process_collectors
from services.scorer.backends import Backend, TorchBackend
from services.scorer.config import ScorerConfig
from services.scorer.http.app import create_app
from services.scorer.models.feed import ModelFeed
from services.scorer.models.follow import Follower
from services.scorer.models.loading import execution_of, load_first, load_served, registry_lookup
from services.scorer.models.served import NO_MODEL, ModelRef, ModelSlot, ServedModel
from services.scorer.models.shelf import ModelShelf
from services.scorer.server import callers, create_server, set_alive, set_health
from services.scorer.service import Scorer
from services.scorer.telemetry import Loaded, ScorerMetrics
from services.scorer.telemetry.bench import BenchCache, store_bench
from services.scorer.triton.available import require_triton
from services.scorer.triton.host import TritonHost
from services.scorer.triton.shared import SharedTriton
from services.scorer.triton.supervisor import RestartPolicy, State, Supervisor
from services.scorer.vllm.engine import VllmEngine
from services.scorer.vllm.serving import options_of

log = logging.getLogger(__name__)


class ScorerServer:
    def __init__(self, config: ScorerConfig, backend: Backend | None = None) -> None:
        """`backend` replaces the one `config.backend` names (benchmarks use an instant one)."""
        self.config = config
        self.grpc_port = 0
        self.http_port = 0
        self.models = ModelSlot()
        self._backend = backend
        self._grpc: Any = None
        self._health: Any = None
        self._http: Any = None
        self._http_thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self.failed = threading.Event()  # the backend is gone for good: the process should be replaced
        self.metrics = ScorerMetrics(enabled=config.metrics, reward_window=config.reward_window)
        self.scorer: Scorer | None = None
        self.supervisor: Supervisor | None = None
        self.follower: Follower | None = None
        self.shelf: ModelShelf | None = None
        self.callers: Authenticate | None = None
        # refused here, before anything loads: a Triton to start without PyTriton, a dtype the device cannot run
        # (an external Triton runs its own)
        if backend is None:
            require_triton(config.backend, config.triton_url)
            if config.backend == "vllm" and not config.vllm_url:
                options_of(config)  # vLLM's Python found, the dtype resolved
        own_triton = config.backend == "triton" and not config.triton_url
        execution = execution_of(config) if config.backend == "torch" or own_triton else None
        # one tritonserver for every model this scorer serves (PyTriton; not for torch or an external Triton)
        self.triton = (
            SharedTriton(execution, config.queue_delay_us)
            if execution is not None and config.backend == "triton" and backend is None
            else None
        )

    @property
    def backend(self) -> Backend | None:
        current = self.models.current
        return current.backend if current else None

    @property
    def host(self) -> TritonHost | VllmEngine | None:
        """The Triton or vLLM engine this process started for the model served now (None: torch, an external one)."""
        current = self.models.current
        return current.host if current else None

    def start(self) -> ScorerServer:
        """Load, bind and serve; on any failure (a taken port, say) release what was started, then raise."""
        try:
            return self._start()
        except BaseException:
            self.stop(grace=0)
            raise

    def _start(self) -> ScorerServer:
        config = self.config
        # the feed's position is fixed before the registry is read: no registration falls between
        feed = ModelFeed(config.bootstrap) if config.follow else None
        lookup = registry_lookup(config.db) if config.follow and config.db else None
        try:
            model, self.models.follow_error = load_first(config, self._backend, lookup, self.triton)
            if model is not None:
                self._instrument(model)
                model.tokenizers.warm()  # in the background: the first calls may wait for a copy
                self.models.swap(model)
        except BaseException:
            if feed is not None:
                feed.close()
            raise
        if feed is not None:
            self.follower = Follower(
                feed, self.models, self._load_default, lookup, count=self.metrics.count_follow_event
            )
        self.shelf = ModelShelf(self.models, self._load, lookup, config.max_models)
        if lookup is not None:  # following the registry: a replaced default model stays for the calls naming it
            self.models.handover = self.shelf.handover
        scorer = self.scorer = Scorer(config, self.models, self.metrics, self.shelf)
        self._watch(self.shelf)
        self.callers = callers(config)  # who may call (None: anyone), on gRPC and HTTP alike
        self._grpc, self.grpc_port, self._health = create_server(config, scorer, self.callers)
        add_process_collectors(self.metrics.registry)  # beside the scorer's own and its gRPC calls': one /metrics
        self._grpc.start()
        if config.http_port >= 0:
            self._start_http(scorer)
        self.supervisor = self._make_supervisor()
        self.supervisor.step()
        self.supervisor.start()
        if self.follower is not None:
            self.follower.start()
        log.info(
            "scorer serving %s: gRPC :%d, HTTP :%d, backend %s%s",
            model.ref.model_id if model else "nothing yet",
            self.grpc_port,
            self.http_port,
            config.backend,
            f", following {MODELS}" if config.follow else "",
        )
        return self

    def _load(self, ref: ModelRef) -> ServedModel:
        """A registered model, loaded beside the current one, its tokenizers made before it serves."""
        model = load_served(self.config, ref, previous=self.models.current, triton=self.triton)
        self._instrument(model)
        model.tokenizers.warm().join()
        return model

    def _instrument(self, model: ServedModel) -> None:
        """The model's forwards counted in /metrics (where its backend batches calls itself: torch)."""
        metrics, model_id = self.metrics, model.ref.model_id
        if not metrics.enabled:
            return
        batcher = getattr(model.backend, "batcher", None)
        if batcher is not None:
            batcher.on_batch = lambda calls, sequences: metrics.observe_batch(model_id, calls, sequences)
        if isinstance(model.backend, TorchBackend):
            model.backend.on_forward = lambda tokens: metrics.observe_tokens(model_id, tokens)

    def _watch(self, shelf: ModelShelf) -> None:
        """What /metrics reads at each scrape: the models loaded now, their engines' own metrics, and (with a store)
        the rewards each gave on its bench."""
        metrics = self.metrics

        def loaded() -> list[Loaded]:
            return [
                Loaded(m.ref.model_id, m.backend.name, m.dtype, default, m.in_flight, m.load_seconds)
                for m, default, _ in shelf.loaded()
            ]

        metrics.watch_models(loaded)
        metrics.watch_backends(lambda: [s for m, _, _ in shelf.loaded() if (s := m.metrics_source()) is not None])
        if self.config.db:
            metrics.use_bench(BenchCache(store_bench(self.config.db)))

    def _load_default(self, ref: ModelRef) -> ServedModel:
        """The model that becomes the default: the shelf's copy when calls naming it loaded it already (the
        candidate the evaluation scored, a model rolled back to), else loaded now."""
        held = self.shelf.held(ref.model_id) if self.shelf is not None else None
        return held if held is not None else self._load(ref)

    def _make_supervisor(self) -> Supervisor:
        """Watches whichever model is current: a switch moves the watch with it."""
        models = self.models

        def ready() -> bool:
            # following the registry without a production model yet: calls that name theirs are served
            current = models.current
            return current.ready() if current is not None else self.follower is not None

        def held() -> list[ServedModel]:
            """The default model, then the others the shelf holds (all in one Triton when it is ours)."""
            current = models.current
            others = [m for m, default, _ in self.shelf.loaded() if not default] if self.shelf is not None else []
            return ([current] if current is not None else []) + others

        def dead() -> bool:
            return any(m.dead() for m in held())

        def restart() -> None:
            # only a dead one: a switch may have replaced the dead model by a live one meanwhile; restarting one
            # model's Triton brings back every model it holds (`SharedTriton.restart`)
            if (victim := next((m for m in held() if m.dead()), None)) is not None:
                victim.restart()

        return Supervisor(
            ready,
            self._publish,
            restart,
            dead=dead,
            policy=RestartPolicy(self.config.triton_restarts),
            interval=self.config.watch_seconds,
        )

    def _publish(self, state: State, why: str) -> None:
        """Health (gRPC and HTTP) and fail-fast calls follow the supervisor."""
        if self._stopped.is_set() or self.scorer is None:
            return
        where = getattr(self.backend, "url", "") or "in process"
        down = NO_MODEL if self.models.current is None else f"the model backend ({where}) is not serving: {why}"
        self.scorer.unavailable = "" if state is State.SERVING else down
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
        app = create_app(scorer, self.ready, self.callers)
        self._http = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", log_config=None))
        self._http_thread = threading.Thread(target=self._http.run, kwargs={"sockets": [sock]}, daemon=True)
        self._http_thread.start()

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls, let in-flight ones finish within `grace` seconds, release everything."""
        if self._stopped.is_set():
            return
        if self.follower is not None:
            self.follower.stop()
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
        if self.triton is not None:  # the whole server at once, before each model would unload itself from it
            self.triton.stop()
        if self.shelf is not None:
            self.shelf.close()
        self.models.close()
        self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stopped (or `timeout` seconds); True once stopped."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> ScorerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(config: ScorerConfig, on_serving: Callable[[ScorerServer], object] | None = None) -> None:
    """Run until SIGTERM or SIGINT, then drain gracefully.

    `on_serving(server)` is called once both ports are bound (`server.grpc_port`, `server.http_port`):
    the command line announces them there, since a service does not print.
    """
    server = ScorerServer(config).start()

    def drain(signum: int, frame: Any) -> None:
        log.info("signal %d: draining for up to %.0f s", signum, config.drain_seconds)
        threading.Thread(target=server.stop, args=(config.drain_seconds,), daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, drain)
    if on_serving is not None:
        on_serving(server)
    while not server.wait(0.5):
        if server.failed.is_set():
            log.error("the model backend could not be restarted: stopping, for a fresh process to take over")
            server.stop(config.drain_seconds)
            raise SystemExit(1)
