"""Running a service as a long-lived process: gRPC with health and reflection, a clean stop on SIGTERM.

Every process that Kubernetes runs answers the standard `grpc.health.v1.Health` service, which the
manifests' gRPC probes call. Request/response services (ingestion, annotation) host their servicers
beside it; Kafka consumers (the evaluator's worker and sink) host health alone, driven by a
`Heartbeat`: a consumer loop that stops polling for `stale_after` seconds turns NOT_SERVING, so the
liveness probe restarts a wedged process.

    host = GrpcHost(HostConfig(port=50052), register=lambda s: add_XServicer_to_server(servicer, s), names=[...],
                    guard=Guard(AccountBook(engine)))      # every call names an account (services.access)
    host.start(); host.set_serving(True); host.wait_for_signal()

With `HostConfig.tls_cert`/`tls_key` the port speaks TLS only (clients pass the CA: `services.channels`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import symbol_database
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from cheems.errors import InvalidInput, PortInUse
from services.observe import tracing
from services.observe.metrics import GrpcServerMetrics, new_registry

log = logging.getLogger(__name__)

# The ports each process listens on; the Kubernetes manifests use the same numbers (a test checks).
SCORER_GRPC_PORT = 50051
SCORER_HTTP_PORT = 8000
INGESTION_PORT = 50052
ANNOTATION_PORT = 50053
ANNOTATION_HTTP_PORT = 8053  # the annotator's page and the admin overview (pages and JSON)
EVAL_WORKER_HEALTH_PORT = 50054
EVAL_SINK_HEALTH_PORT = 50055
EVALUATION_PORT = 50056
EVALUATION_HTTP_PORT = 8056  # the leaderboard (pages and JSON) of the evaluation service
TRAINING_PORT = 50057
JUDGE_HEALTH_PORT = 50058
# Prometheus /metrics of the processes without an HTTP port (`--metrics-port`); the others serve it on their HTTP
# port (SCORER_HTTP_PORT, ANNOTATION_HTTP_PORT, EVALUATION_HTTP_PORT). The gRPC port's last two digits, after 90.
INGESTION_METRICS_PORT = 9052
EVAL_WORKER_METRICS_PORT = 9054
EVAL_SINK_METRICS_PORT = 9055
TRAINING_METRICS_PORT = 9057
JUDGE_METRICS_PORT = 9058

# Health service names: readiness is "" (and each hosted service's name), liveness its own name, so a
# process that is alive but not ready (a model still loading) is taken out of rotation, not restarted.
LIVENESS = "liveness"

MAX_CONNECTION_AGE_S = 300.0  # then the server ends the connection (GOAWAY): clients reconnect, maybe elsewhere
MAX_CONNECTION_AGE_GRACE_S = 120.0  # the calls in flight on it get this long to finish


def server_options(
    max_age_s: float = MAX_CONNECTION_AGE_S, grace_s: float = MAX_CONNECTION_AGE_GRACE_S
) -> list[tuple[str, Any]]:
    """Options of every gRPC server here.

    - SO_REUSEPORT off: gRPC would let a second server bind a taken port and split the connections between the
      two; every server here refuses instead (`bind` raises PortInUse).
    - A maximum connection age: a client the project did not write (grpcurl, a Go stub, a trainer with one
      channel) keeps one HTTP/2 connection for its whole life, so behind a ClusterIP Service all its calls
      would stay on the replica it first reached, and replicas the autoscaler adds later would get none of it.
      Ending each connection after `max_age_s` (its calls in flight given `grace_s`) makes it reconnect, and
      the Service spreads the new connections.
    - Keepalive pings from clients are accepted every 10 s or more, calls or not (`services.channels` sends one
      every 30 s); gRPC's default would answer them with GOAWAY "too_many_pings".
    """
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_connection_age_ms", int(max_age_s * 1000)),
        ("grpc.max_connection_age_grace_ms", int(grace_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ]


SERVER_OPTIONS = server_options()


def bind(server: grpc.Server, address: str, credentials: grpc.ServerCredentials | None = None) -> int:
    """Listen on `address` (host:port, port 0 = any free one); PortInUse when it is taken."""
    try:
        if credentials is not None:
            return server.add_secure_port(address, credentials)
        return server.add_insecure_port(address)
    except RuntimeError as e:
        raise PortInUse(f"cannot listen on {address}: the address is in use (another server?) ({e})") from None


def checked_handler(
    servicer: Any, service: ServiceDescriptor, inspect: Callable[[str, bytes, grpc.ServicerContext], None] | None = None
) -> grpc.GenericRpcHandler:
    """The unary methods of `servicer` for `service`, with requests parsed here rather than by gRPC.

    gRPC answers a request it cannot parse (truncated bytes, invalid UTF-8 in a string) with
    INTERNAL "Exception deserializing request!"; that is the client's error, so it gets
    INVALID_ARGUMENT naming the message type. `inspect(method name, raw bytes, context)`, when given,
    sees each request before it is parsed and may abort it. Register with
    `server.add_generic_rpc_handlers`.
    """
    handlers = {}
    for method in service.methods:
        if method.client_streaming or method.server_streaming:
            raise ValueError(f"{method.full_name}: checked_handler serves unary methods only")
        request_type = symbol_database.Default().GetSymbol(method.input_type.full_name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _parsing(getattr(servicer, method.name), request_type, method.name, inspect),
            response_serializer=lambda reply: reply.SerializeToString(),
        )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


def _parsing(
    behaviour: Callable[[Any, grpc.ServicerContext], Any],
    request_type: Any,
    name: str,
    inspect: Callable[[str, bytes, grpc.ServicerContext], None] | None,
) -> Callable[..., Any]:
    def handle(raw: bytes, context: grpc.ServicerContext) -> Any:
        if inspect is not None:
            inspect(name, raw, context)
        try:
            request = request_type.FromString(raw)
        except DecodeError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"not a valid {request_type.DESCRIPTOR.full_name}: {e}")
        return behaviour(request, context)

    return handle


@dataclass(frozen=True)
class HostConfig:
    port: int  # 0 = any free port
    host: str = "127.0.0.1"  # this machine only; pods pass --host 0.0.0.0
    workers: int = 8  # handler threads
    drain_seconds: float = 10.0  # grace period for in-flight calls after SIGTERM
    tls_cert: str = ""  # PEM certificate chain: the port speaks TLS only (with tls_key)
    tls_key: str = ""  # PEM private key of tls_cert

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key must be given together")


def server_credentials(cert: str, key: str) -> grpc.ServerCredentials | None:
    """TLS credentials of a PEM certificate and key (None without them); InvalidInput for a file not read."""
    if not cert:
        return None
    try:
        with open(key, "rb") as k, open(cert, "rb") as c:
            return grpc.ssl_server_credentials([(k.read(), c.read())])
    except OSError as e:
        raise InvalidInput(f"cannot read the TLS certificate or key: {e}") from None


class GrpcHost:
    """A gRPC server carrying `register`'s servicers plus health (NOT_SERVING until `set_serving`); `guard`: the
    interceptor checking each call's account (`services.access.Guard`; a health-only host needs none).

    `registry`: the process's Prometheus registry (a new one with the process collectors when not given), where
    every call is counted and timed (`services.observe.metrics.GrpcServerMetrics`, before the guard: refused calls
    count too); the process serves it on `/metrics`."""

    def __init__(
        self,
        config: HostConfig,
        register: Callable[[grpc.Server], None] | None = None,
        names: Sequence[str] = (),
        guard: grpc.ServerInterceptor | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config, self.names = config, tuple(names)
        self.registry = registry if registry is not None else new_registry()
        interceptors: list[grpc.ServerInterceptor] = [GrpcServerMetrics(self.registry)]
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.workers),
            # a span per call, then counted (refused calls too), then the account checked
            interceptors=[i for i in (tracing.server_interceptor(), *interceptors, guard) if i is not None],
            options=SERVER_OPTIONS,
        )
        if register is not None:
            register(self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection([*self.names, health.SERVICE_NAME, reflection.SERVICE_NAME], self.server)
        credentials = server_credentials(config.tls_cert, config.tls_key)
        self.port = bind(self.server, f"{config.host}:{config.port}", credentials)
        self.set_serving(False)
        self.set_alive(True)
        self._stopped = threading.Event()

    def start(self) -> GrpcHost:
        self.server.start()
        return self

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", *self.names):
            self.health.set(name, status)

    def set_alive(self, alive: bool) -> None:
        """The liveness answer (the `liveness` health service): False makes Kubernetes restart the pod."""
        status = health_pb2.HealthCheckResponse.SERVING if alive else health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set(LIVENESS, status)

    def stop(self, grace: float | None = None) -> None:
        """Turn NOT_SERVING, let in-flight calls finish within `grace` seconds, then stop."""
        self.set_serving(False)
        self.server.stop(self.config.drain_seconds if grace is None else grace).wait()
        self._stopped.set()

    def wait_for_signal(self, on_stop: Callable[[], None] | None = None) -> None:
        """Block until SIGTERM or SIGINT, then run `on_stop` and drain. Main thread only."""

        def drain(signum: int, frame: Any) -> None:
            log.info("signal %d: stopping (grace %.0f s)", signum, self.config.drain_seconds)
            if on_stop is not None:
                on_stop()
            threading.Thread(target=self.stop, daemon=True).start()

        signal.signal(signal.SIGTERM, drain)
        signal.signal(signal.SIGINT, drain)
        self._stopped.wait()


class Heartbeat:
    """Readiness and liveness from a loop: SERVING while `beat()` was called within `stale_after` seconds.

    `readiness=False`: the loop drives liveness alone (a process whose gRPC service stays ready without it).
    """

    def __init__(
        self,
        host: GrpcHost,
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        readiness: bool = True,
    ) -> None:
        if stale_after <= 0:
            raise ValueError(f"stale_after must be > 0, got {stale_after}")
        self.host, self.stale_after, self.clock, self.readiness = host, stale_after, clock, readiness
        self.last = clock()
        self._serving: bool | None = None

    def beat(self) -> None:
        self.last = self.clock()
        self.check()

    def check(self) -> bool:
        """Publish and return whether the last beat is recent enough."""
        serving = self.clock() - self.last <= self.stale_after
        if serving != self._serving:
            if not serving:
                log.warning("no heartbeat for %.0f s: health NOT_SERVING", self.clock() - self.last)
            if self.readiness:
                self.host.set_serving(serving)
            self.host.set_alive(serving)
            self._serving = serving
        return serving

    def watch(self, stop: threading.Event, every: float = 1.0) -> threading.Thread:
        """Re-check in the background, so a loop that hangs (and never beats again) is noticed."""

        def loop() -> None:
            while not stop.wait(every):
                self.check()

        thread = threading.Thread(target=loop, name="heartbeat", daemon=True)
        thread.start()
        return thread
