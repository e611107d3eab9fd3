"""gRPC adapter of `cheems.v1.EvaluationService`: start a CheemsBench run through Kafka, then watch it.

    cheems service evaluation --bootstrap HOST:9092 --db URL --bench-root DIR   # gRPC on :50056
    cheems service evaluation ... --evaluate-models open.jsonl --evaluate-models human.jsonl --scorer-url HOST:50051
    cheems service evaluation ... --http-port 8056   # the leaderboard on http://HOST:8056/ (-1: none)

StartRun checks the request, records the run and publishes one score request per benchmark prompt
(`evaluator.pipeline.runs.start_run`); the score workers and the result sink do the rest. GetRun reads the
run's state, progress and, once complete, its metrics from the store. A request naming a `model_id`
evaluates that registered model: only its scores are taken (NOT_FOUND for a model not registered).

With `EvaluationConfig.models` the service also evaluates every newly registered model
(`evaluator.pipeline.model_runs`, a consumer of cheems.models.v1 in a thread beside the gRPC server, stopped
on SIGTERM); if that consumer dies, liveness turns NOT_SERVING so the process is replaced.

With `EvaluationConfig.http_port` the same process serves the leaderboard over HTTP
(`evaluator.leaderboard.app`: pages and JSON, /health), on the gRPC server's address.

Bench files are named relative to the service's bench root (in Kubernetes the shared volume, which
the result sink mounts at the same path); a name that leaves the root is refused (`cheems.formats.benchfile`).
Every call needs an operator's or admin's bearer token (`services.access`): UNAUTHENTICATED / PERMISSION_DENIED
before the request is read. Errors are kinds
of `cheems.errors`, mapped to a status by `services.grpc_errors.abort`: INVALID_ARGUMENT for a bad
request (the message names the field, or the file and line), NOT_FOUND for an unknown run,
UNAVAILABLE when the broker does not take the score requests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from prometheus_client import CollectorRegistry
from sqlalchemy.engine import Engine

from cheems.errors import CheemsError
from cheems.formats.benchfile import bench_file_under
from cheems.v1 import evaluation_pb2, evaluation_pb2_grpc
from evaluator.calibration import DEFAULT_BINS
from evaluator.convert import semantics_from_proto
from evaluator.errors import BadRequest
from evaluator.evaluate import EvalOptions
from evaluator.leaderboard.app import create_app
from evaluator.pipeline.gate import Gate, GatePolicy
from evaluator.pipeline.model_runs import ModelEvaluator, ModelRunsConfig
from evaluator.pipeline.runs import require_model, run_message, start_run
from services.access import Authenticate, Guard
from services.bus.client import EventConsumer, Publisher
from services.bus.metrics import watch_consumers
from services.grpc_errors import abort
from services.hosting import EVALUATION_PORT, GrpcHost, HostConfig
from services.observe.metrics import ReadAtScrape, new_registry
from services.store.reads import state_counts
from services.web import HttpServer

log = logging.getLogger(__name__)
SERVICE = "cheems.v1.EvaluationService"


@dataclass(frozen=True)
class EvaluationConfig:
    """bench_root: bench files are read from under here and nowhere else; host: the gRPC server;
    models: evaluate every newly registered model on these files (None: only the runs asked for);
    http_port: the leaderboard's HTTP port on host.host (0 = any free port, -1 = no HTTP);
    gate: the promotion policy applied to each evaluated model (evaluator.pipeline.gate), with `models`."""

    bench_root: Path
    host: HostConfig = field(default_factory=lambda: HostConfig(port=EVALUATION_PORT))
    models: ModelRunsConfig | None = None
    http_port: int = -1
    gate: GatePolicy = field(default_factory=GatePolicy)  # with `models`: what an evaluated model becomes

    def __post_init__(self) -> None:
        if not -1 <= self.http_port <= 65535:
            raise ValueError(f"http_port must be -1 (none) or in 0..65535, got {self.http_port}")


def resolve_bench(root: Path, names: Sequence[str]) -> list[Path]:
    """Each name as a file under `root` (`cheems.formats.benchfile.bench_file_under`); BadRequest naming
    `bench_files[i]`."""
    if not names:
        raise BadRequest("bench_files: name at least one bench file")
    return [bench_file_under(root, name, f"bench_files[{i}]", BadRequest) for i, name in enumerate(names)]


class EvaluationServicer(evaluation_pb2_grpc.EvaluationServiceServicer):
    def __init__(self, engine: Any, publisher: Publisher, bench_root: Path) -> None:
        self.engine, self.publisher, self.bench_root = engine, publisher, bench_root

    def StartRun(self, request: Any, context: grpc.ServicerContext) -> evaluation_pb2.EvalRun:
        try:
            return self.start(request)
        except CheemsError as e:  # a malformed bench file's message names the file and line
            abort(context, e)

    def GetRun(self, request: Any, context: grpc.ServicerContext) -> evaluation_pb2.EvalRun:
        try:
            if not request.run_id:
                raise BadRequest("run_id: required")
            return run_message(self.engine, request.run_id)
        except CheemsError as e:
            abort(context, e)

    def start(self, request: evaluation_pb2.StartRunRequest) -> evaluation_pb2.EvalRun:
        """Check the request, then record and publish the run (nothing is stored for a bad request)."""
        paths = resolve_bench(self.bench_root, list(request.bench_files))
        if not request.scorer_url.strip():
            raise BadRequest("scorer_url: give the scorer's gRPC address, host:port")
        options = EvalOptions(semantics_from_proto(request.semantics), request.ece_bins or DEFAULT_BINS)
        if request.model_id:
            require_model(self.engine, request.model_id)
        bench = [str(p) for p in paths]
        run_id = start_run(self.engine, self.publisher, bench, request.scorer_url, options, model_id=request.model_id)
        return run_message(self.engine, run_id)


def host(
    servicer: EvaluationServicer,
    config: HostConfig,
    authenticate: Authenticate,
    registry: CollectorRegistry | None = None,
) -> GrpcHost:
    """The servicer on a GrpcHost (health, reflection), serving as soon as it is started; `authenticate`: the
    accounts callers' tokens are checked against; `registry`: the process's metrics (`evaluation_metrics`)."""
    grpc_host = GrpcHost(
        config,
        lambda server: evaluation_pb2_grpc.add_EvaluationServiceServicer_to_server(servicer, server),
        [SERVICE],
        Guard(authenticate),
        registry if registry is not None else evaluation_metrics(servicer.engine),
    )
    grpc_host.set_serving(True)
    return grpc_host


def evaluation_metrics(engine: Engine) -> CollectorRegistry:
    """The process's registry: evaluation runs in the store by state (read at each scrape), the model evaluator's
    and the gate's consumer lag and dead letters, beside the gRPC calls'."""
    registry = new_registry()
    registry.register(
        ReadAtScrape("cheems_eval_runs", "Evaluation runs in the store, by state (running, succeeded, failed)",
                     lambda: state_counts(engine, "runs"), label="state")
    )  # fmt: skip
    watch_consumers(registry)
    return registry


def serve(
    db: str,
    bootstrap: str,
    config: EvaluationConfig,
    on_ready: Callable[[int], None] | None = None,
    on_http: Callable[[int], None] | None = None,
) -> None:
    """`cheems service evaluation`: migrate-free (run `cheems db upgrade` first), until SIGTERM.

    `on_ready(port)` runs once the server listens (the port bound, which config.host.port 0 leaves open);
    `on_http(port)` once the leaderboard's HTTP port listens (with config.http_port >= 0).
    """
    from services.store.accounts import AccountBook
    from services.store.db import StoreConfig, create_engine_for

    engine = create_engine_for(StoreConfig(db))
    registry, web = evaluation_metrics(engine), None
    if config.http_port >= 0:  # first: a taken HTTP port stops the process before it connects to anything
        web = HttpServer(create_app(engine, registry=registry), config.host.host, config.http_port).start()
    publisher = Publisher(bootstrap, max_block_ms=10000)  # a StartRun fails within ~10 s when Kafka is down
    servicer = EvaluationServicer(engine, publisher, config.bench_root)
    grpc_host = host(servicer, config.host, AccountBook(engine), registry).start()
    stop = threading.Event()
    follower = None
    gate = None
    if config.models is not None:
        evaluator = ModelEvaluator(bootstrap, engine, publisher, config.models)
        lost = "new models are not evaluated"
        follower = consume_in_thread("model evaluator", evaluator.consumer, evaluator.close, stop, grpc_host, lost)
        log.info("evaluating every new model on %s", ", ".join(evaluator.config.bench))
        decider = Gate(engine, config.gate).consumer(bootstrap)
        lost = "evaluated models are not decided"
        gate = consume_in_thread("promotion gate", decider, decider.close, stop, grpc_host, lost)
        log.info("promotion gate: %s", config.gate)
    log.info("evaluation serving on %s:%d, bench root %s", config.host.host, grpc_host.port, config.bench_root)
    if on_ready is not None:
        on_ready(grpc_host.port)
    if web is not None and on_http is not None:
        on_http(web.port)
    grpc_host.wait_for_signal(stop.set)
    if web is not None:
        web.stop()
    if follower is not None:
        follower.join(timeout=30)
    if gate is not None:
        gate.join(timeout=30)
    publisher.close()


def consume_in_thread(
    name: str, consumer: EventConsumer, close: Callable[[], None], stop: threading.Event, grpc_host: GrpcHost, lost: str
) -> threading.Thread:
    """Run `consumer` in a thread until `stop`, then `close()`; a consumer that dies turns liveness NOT_SERVING
    (`lost`: what stops working, for the log)."""

    def loop() -> None:
        try:
            consumer.run(stop)
        except Exception:
            log.exception("the %s stopped: %s (liveness NOT_SERVING)", name, lost)
            grpc_host.set_alive(False)
        finally:
            close()

    thread = threading.Thread(target=loop, name=name.replace(" ", "-"), daemon=True)
    thread.start()
    return thread
