"""gRPC adapter: `cheems.v1.RewardService` plus health, reflection and bearer-token auth (`callers`).

Servicers only decode, call `Scorer`, and encode; scorer errors become gRPC statuses here, each with
trailing metadata `cheems-error-reason` (the error's `reason`) so clients decide on retries without
reading message text. Requests are parsed by `hosting.checked_handler`, so bytes that are not a
valid request get INVALID_ARGUMENT. A call without a deadline (grpcurl, Go and Java stubs) is fine:
it gets the server's `max_call_seconds`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry

from cheems.roles import SCORER_CLIENT, Caller
from cheems.v1 import reward_pb2
from services.access import Authenticate, Guard, first_of, static_token
from services.grpc_errors import abort, status_of
from services.hosting import LIVENESS, bind, checked_handler, server_credentials, server_options
from services.observe import tracing
from services.observe.metrics import GrpcServerMetrics
from services.scorer.config import ScorerConfig
from services.scorer.deadline import Deadline
from services.scorer.errors import (
    InvalidRequest,
    LimitExceeded,
    ScorerError,
)
from services.scorer.service import ScoreArgs, Scorer, Scores
from services.scorer.telemetry import ScorerMetrics
from services.scorer.wire import oversized_text

log = logging.getLogger(__name__)
SERVICE_DESCRIPTOR = reward_pb2.DESCRIPTOR.services_by_name["RewardService"]
SERVICE = SERVICE_DESCRIPTOR.full_name


def score_args(request: reward_pb2.ScoreRequest) -> ScoreArgs:
    history = [(m.role, m.content) for m in request.history]
    return ScoreArgs(request.prompt, list(request.responses), request.system_prompt, history, request.model)


class RewardServicer:
    """The methods of cheems.v1.RewardService (registered through `checked_handler`)."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def _encode(self, request: reward_pb2.ScoreRequest, s: Scores) -> reward_pb2.ScoreResponse:
        request_id = request.request_id or uuid.uuid4().hex  # the caller's, else one to quote in a report
        timings = {"queue_ms": s.queue_ms, "inference_ms": s.inference_ms, "total_ms": s.total_ms}
        log.debug(
            "scored %d responses with %s: queue %.1f ms, inference %.1f ms, total %.1f ms",
            len(s.scores), s.model, *timings.values(), extra={"request_id": request_id, "model_id": s.model, **timings},
        )  # fmt: skip
        return reward_pb2.ScoreResponse(
            scores=s.scores,
            best_index=s.best_index,
            truncated=s.truncated,
            model=s.model,
            request_id=request_id,
            timings=reward_pb2.Timings(queue_ms=s.queue_ms, inference_ms=s.inference_ms, total_ms=s.total_ms),
        )

    def inspect(self, method: str, raw: bytes, context: grpc.ServicerContext) -> None:
        """Before parsing: a request too big to parse cheaply is refused if a text field in it is over
        length for certain (truncation "error" only; under left/right it is parsed and clipped)."""
        scorer = self.scorer
        max_bytes = 4 * scorer.char_budget  # at least bytes/4 characters
        if len(raw) <= max_bytes or scorer.config.truncation != "error" or method == "GetModelInfo" or not max_bytes:
            return  # (no budget before the first model is loaded: the call fails as UNAVAILABLE)
        found = oversized_text(raw, f"{method}Request", max_bytes)
        if found is not None:
            path, size = found
            error = LimitExceeded(
                f"{path} is {size} bytes, more than max_length {scorer.config.max_length} tokens can hold "
                "(the server does not truncate)"
            )
            self._abort(method, context, error)

    def _abort(self, api: str, context: grpc.ServicerContext, e: ScorerError) -> None:
        """End the call with the error's status and reason (raises, as `context.abort` does)."""
        code = status_of(e)
        self.scorer.metrics.count(api, code.name)
        log.info("%s -> %s: %s", api, code.name, e)
        abort(context, e)

    def _call(self, api: str, context: grpc.ServicerContext, work: Callable[[Deadline], Any]) -> Any:
        started = time.perf_counter()
        deadline = self.scorer.deadline(context.time_remaining(), context.is_active)
        try:
            reply = work(deadline)
        except ScorerError as e:
            self._abort(api, context, e)
        self.scorer.metrics.count(api, "OK", model_of(reply), time.perf_counter() - started)
        return reply

    def Score(self, request: reward_pb2.ScoreRequest, context: grpc.ServicerContext) -> reward_pb2.ScoreResponse:
        return self._call(
            "Score", context, lambda deadline: self._encode(request, self.scorer.score(score_args(request), deadline))
        )

    def ScoreBatch(
        self, request: reward_pb2.ScoreBatchRequest, context: grpc.ServicerContext
    ) -> reward_pb2.ScoreBatchResponse:
        def work(deadline: Deadline) -> reward_pb2.ScoreBatchResponse:
            limit = self.scorer.config.max_batch_items
            if len(request.items) > limit:
                raise LimitExceeded(f"{len(request.items)} items exceed the limit of {limit} per ScoreBatch call")
            if not request.items:
                raise InvalidRequest("items is empty: send at least one ScoreRequest")
            results = self.scorer.score_many([score_args(item) for item in request.items], deadline)
            return reward_pb2.ScoreBatchResponse(
                results=[self._encode(item, s) for item, s in zip(request.items, results, strict=True)]
            )

        return self._call("ScoreBatch", context, work)

    def GetModelInfo(self, request: reward_pb2.ModelInfoRequest, context: grpc.ServicerContext) -> reward_pb2.ModelInfo:
        config, models = self.scorer.config, self.scorer.models
        current = models.current
        return reward_pb2.ModelInfo(
            name=current.ref.name if current else "",
            backend=current.backend.name if current else config.backend,
            max_length=config.max_length,
            max_responses=config.max_responses,
            truncation=config.truncation,
            model_id=current.ref.model_id if current else "",
            follow_error=models.follow_error,
            # a backend that does not say (a benchmark's stand-in) does not share
            prefix_sharing=getattr(current.backend, "prefix_sharing", False) if current else config.prefix_sharing,
            dtype=current.dtype if current else "",
            attn_implementation=current.attention if current else "",
            models=[
                reward_pb2.LoadedModel(
                    model_id=m.ref.model_id,
                    aliases=a,
                    is_default=default,
                    in_flight=m.in_flight,
                    dtype=m.dtype,
                    attn_implementation=m.attention,
                    reward_watch=reward_watch(self.scorer.metrics, m.ref.model_id),
                )
                for m, default, a in self.scorer.shelf.loaded()
            ],
        )


def reward_watch(metrics: ScorerMetrics, model_id: str) -> reward_pb2.RewardWatch | None:
    """The reward watch's figures of one model for GetModelInfo (None when it has none: no reward served yet, and
    no bench figures)."""
    figures = metrics.watch.figures(model_id)
    bench = metrics.watch.bench(model_id) if metrics.watch.bench is not None else None
    if figures is None and bench is None:
        return None
    watch = reward_pb2.RewardWatch()
    if figures is not None:
        watch.count, watch.mean, watch.std = figures.count, figures.mean or 0.0, figures.std or 0.0
        if figures.length_correlation is not None:
            watch.length_correlation = figures.length_correlation
    if bench is not None:
        watch.bench_mean, watch.bench_std, watch.bench_run_id = bench.mean, bench.std, bench.run_id
    return watch


def model_of(reply: Any) -> str:
    """The id of the model that scored a Score or ScoreBatch reply (a batch naming several: its first item's)."""
    if isinstance(reply, reward_pb2.ScoreBatchResponse):
        return reply.results[0].model if reply.results else ""
    return str(getattr(reply, "model", ""))


def callers(config: ScorerConfig) -> Authenticate | None:
    """Who may call (None: anyone): the static --token (a scorer-client named "token"; the scorer may run without a
    store), and with --accounts the store's accounts whose role scores (`cheems.roles`; one read per call, so a
    disabled account is refused at once)."""
    static = static_token(config.token, Caller("token", SCORER_CLIENT)) if config.token else None
    if not config.accounts:
        return static
    from services.store.accounts import AccountBook
    from services.store.db import StoreConfig, create_engine_for

    return first_of(static, AccountBook(create_engine_for(StoreConfig(config.db))))


def create_server(
    config: ScorerConfig,
    scorer: Scorer,
    authenticate: Authenticate | None = None,
    registry: CollectorRegistry | None = None,
) -> tuple[grpc.Server, int, Any]:
    """(server, bound port, health servicer). Health says NOT_SERVING until `set_health`; PortInUse
    when the port is taken. `authenticate`: how callers' tokens are checked (default `accounts.callers(config)`,
    which asks no credential without --token and --accounts). Health and reflection stay open for probes.
    `registry`: where every call is counted and timed (gRPC RED metrics, refused calls included; default: the
    scorer's own, `scorer.metrics.registry`)."""
    authenticate = authenticate if authenticate is not None else callers(config)
    counted = GrpcServerMetrics(registry if registry is not None else scorer.metrics.registry)
    guard = Guard(authenticate) if authenticate is not None else None
    # a span per call, then counted (refused calls too), then the account checked
    interceptors = [i for i in (tracing.server_interceptor(), counted, guard) if i is not None]
    options = [
        *server_options(config.max_connection_age, config.max_connection_age_grace),
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.workers), interceptors=interceptors, options=options
    )
    servicer = RewardServicer(scorer)
    server.add_generic_rpc_handlers((checked_handler(servicer, SERVICE_DESCRIPTOR, servicer.inspect),))
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    set_health(health_servicer, serving=False)
    set_alive(health_servicer, alive=True)  # alive while loading: no restart
    reflection.enable_server_reflection([SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    credentials = server_credentials(config.tls_cert, config.tls_key)
    port = bind(server, f"{config.host}:{config.grpc_port}", credentials)
    return server, port, health_servicer


def _status(ok: bool) -> Any:
    return health_pb2.HealthCheckResponse.SERVING if ok else health_pb2.HealthCheckResponse.NOT_SERVING


def set_health(servicer: Any, serving: bool) -> None:
    """Readiness: "" and the RewardService name."""
    for name in ("", SERVICE):
        servicer.set(name, _status(serving))


def set_alive(servicer: Any, alive: bool) -> None:
    """Liveness (`liveness`): NOT_SERVING makes the orchestrator restart the process."""
    servicer.set(LIVENESS, _status(alive))
