"""gRPC adapter: `cheems.v1.RewardService` plus health, reflection and bearer-token auth.

Servicers only decode, call `Scorer`, and encode; scorer errors become gRPC statuses here.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.hosting import LIVENESS
from services.scorer.config import ScorerConfig
from services.scorer.errors import (
    BackendUnavailable,
    DeadlineExceeded,
    InvalidRequest,
    LimitExceeded,
    ScorerError,
)
from services.scorer.service import Scorer

log = logging.getLogger(__name__)
SERVICE = reward_pb2.DESCRIPTOR.services_by_name["RewardService"].full_name
STATUS = [
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (LimitExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (BackendUnavailable, grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (ScorerError, grpc.StatusCode.INTERNAL),
]


def status_of(error: ScorerError) -> grpc.StatusCode:
    return next(code for kind, code in STATUS if isinstance(error, kind))


class RewardServicer(reward_pb2_grpc.RewardServiceServicer):
    def __init__(self, scorer: Scorer, model_name: str) -> None:
        self.scorer, self.model_name = scorer, model_name

    def _reply(self, request: reward_pb2.ScoreRequest, timeout: float | None) -> reward_pb2.ScoreResponse:
        history = [(m.role, m.content) for m in request.history]
        s = self.scorer.score(request.prompt, list(request.responses), request.system_prompt, history, timeout)
        return reward_pb2.ScoreResponse(
            scores=s.scores,
            best_index=s.best_index,
            truncated=s.truncated,
            model=self.model_name,
            request_id=request.request_id,
            timings=reward_pb2.Timings(queue_ms=s.queue_ms, inference_ms=s.inference_ms, total_ms=s.total_ms),
        )

    def _call(self, api: str, context: grpc.ServicerContext, work: Callable[[float | None], Any]) -> Any:
        metrics = self.scorer.metrics
        started = time.perf_counter()
        try:
            reply = work(context.time_remaining())
        except ScorerError as e:
            code = status_of(e)
            metrics.requests.labels(api, code.name).inc()
            log.info("%s -> %s: %s", api, code.name, e)
            context.abort(code, str(e))
        metrics.requests.labels(api, "OK").inc()
        metrics.latency.labels(api).observe(time.perf_counter() - started)
        return reply

    def Score(self, request: reward_pb2.ScoreRequest, context: grpc.ServicerContext) -> reward_pb2.ScoreResponse:
        return self._call("Score", context, lambda timeout: self._reply(request, timeout))

    def ScoreBatch(
        self, request: reward_pb2.ScoreBatchRequest, context: grpc.ServicerContext
    ) -> reward_pb2.ScoreBatchResponse:
        def work(timeout: float | None) -> reward_pb2.ScoreBatchResponse:
            results = []
            for i, item in enumerate(request.items):
                try:
                    results.append(self._reply(item, timeout))
                except ScorerError as e:
                    raise type(e)(f"items[{i}]: {e}") from e
            return reward_pb2.ScoreBatchResponse(results=results)

        return self._call("ScoreBatch", context, work)

    def GetModelInfo(self, request: reward_pb2.ModelInfoRequest, context: grpc.ServicerContext) -> reward_pb2.ModelInfo:
        config = self.scorer.config
        return reward_pb2.ModelInfo(
            name=self.model_name,
            backend=self.scorer.backend.name,
            max_length=config.max_length,
            max_responses=config.max_responses,
            truncation=config.truncation,
        )


def bearer_ok(metadata: Any, token: str) -> bool:
    values = [v for k, v in (metadata or ()) if k == "authorization"]
    return bool(values) and hmac.compare_digest(str(values[0]), f"Bearer {token}")


class BearerAuth(grpc.ServerInterceptor):
    """UNAUTHENTICATED unless `authorization: Bearer <token>`; health and reflection stay open for probes."""

    OPEN = ("/grpc.health.v1.Health/", "/grpc.reflection.")

    def __init__(self, token: str) -> None:
        self.token = token
        self._deny = grpc.unary_unary_rpc_method_handler(
            lambda request, context: context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        )

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if details.method.startswith(self.OPEN) or bearer_ok(details.invocation_metadata, self.token):
            return continuation(details)
        return self._deny


def create_server(config: ScorerConfig, scorer: Scorer, model_name: str) -> tuple[grpc.Server, int, Any]:
    """(server, bound port, health servicer). Health says NOT_SERVING until `mark_serving`."""
    interceptors = [BearerAuth(config.auth_token)] if config.auth_token else []
    options = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=config.workers), interceptors=interceptors, options=options
    )
    reward_pb2_grpc.add_RewardServiceServicer_to_server(RewardServicer(scorer, model_name), server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    set_health(health_servicer, serving=False)
    health_servicer.set(LIVENESS, health_pb2.HealthCheckResponse.SERVING)  # alive while loading: no restart
    reflection.enable_server_reflection([SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    address = f"{config.host}:{config.grpc_port}"
    if config.tls_cert:
        with open(config.tls_key, "rb") as k, open(config.tls_cert, "rb") as c:
            port = server.add_secure_port(address, grpc.ssl_server_credentials([(k.read(), c.read())]))
    else:
        port = server.add_insecure_port(address)
    return server, port, health_servicer


def set_health(servicer: Any, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", SERVICE):
        servicer.set(name, status)
