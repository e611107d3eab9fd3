"""gRPC adapter of `cheems.v1.AnnotationService`: decode, call `AnnotationService`, encode.

Bad input gets a status and stores nothing: unknown prompt -> NOT_FOUND; unknown response or task
ids, a malformed order or verdict -> INVALID_ARGUMENT; a completed task, or an annotation id reused
with other content -> FAILED_PRECONDITION.

    grpc_host = host(engine, HostConfig(port=0)).start()   # grpc_host.port
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from sqlalchemy.engine import Engine

from cheems.v1 import annotation_pb2, annotation_pb2_grpc, common_pb2
from services.annotation.service import AnnotationService
from services.grpc_errors import abort
from services.hosting import GrpcHost, HostConfig
from services.store.errors import (
    InvalidRecord,
    StoreError,
    UnknownPrompt,
)

log = logging.getLogger(__name__)
KINDS = {annotation_pb2.ANNOTATOR_KIND_HUMAN: "human", annotation_pb2.ANNOTATOR_KIND_AI: "ai"}


def result_of(annotation: annotation_pb2.Annotation) -> dict[str, Any]:
    """The stored form of a pairwise verdict or an ordering with ties."""
    which = annotation.WhichOneof("result")
    if which == "order":
        return {"order": [list(g.ids) for g in annotation.order.groups]}
    if which == "pair":
        pair = annotation.pair
        if pair.verdict == annotation_pb2.VERDICT_A_BETTER:
            return {"better": pair.a, "worse": pair.b}
        if pair.verdict == annotation_pb2.VERDICT_B_BETTER:
            return {"better": pair.b, "worse": pair.a}
        if pair.verdict == annotation_pb2.VERDICT_TIE:
            return {"equal": [pair.a, pair.b]}
        raise InvalidRecord("pair.verdict is unspecified")
    raise InvalidRecord("annotation needs a result: pair or order")


class AnnotationServicer(annotation_pb2_grpc.AnnotationServiceServicer):
    def __init__(self, service: AnnotationService) -> None:
        self.service = service

    def _run(self, context: grpc.ServicerContext, work: Any) -> Any:
        try:
            return work()
        except StoreError as e:
            abort(context, e)

    def CreateTasks(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            tasks = self.service.create_tasks(request.prompt_id, request.group_size or 3)
            return annotation_pb2.CreateTasksResponse(
                tasks=[
                    annotation_pb2.AnnotationTask(task_id=t, prompt_id=request.prompt_id, response_ids=keys)
                    for t, keys in tasks
                ]
            )

        return self._run(context, work)

    def SubmitAnnotation(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            if not request.annotation_id or not request.annotator:
                raise InvalidRecord("annotation_id and annotator are required")
            kind = KINDS.get(request.kind)
            if kind is None:
                raise InvalidRecord("kind must be ANNOTATOR_KIND_HUMAN or ANNOTATOR_KIND_AI")
            created = self.service.submit(
                request.annotation_id,
                request.prompt_id,
                request.annotator,
                kind,
                result_of(request),
                list(request.discarded),
                request.task_id or None,
            )
            return annotation_pb2.SubmitAnnotationResponse(created=created)

        return self._run(context, work)

    def Resolve(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            resolved = self.service.resolve(request.prompt_id)
            ranking = common_pb2.Ranking(prompt_id=request.prompt_id, rank=resolved.rank)
            return annotation_pb2.ResolveResponse(
                ranking=ranking, conflicts=resolved.conflicts, merged_nodes=resolved.merged_nodes
            )

        return self._run(context, work)

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            if not request.path:
                raise InvalidRecord("path is required")
            records, digest = self.service.export(request.kind, request.path, request.debias)
            return annotation_pb2.ExportResponse(records=records, sha256=digest)

        return self._run(context, work)

    def GetRanking(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            resolved = self.service.ranking(request.prompt_id)
            if resolved is None:
                raise UnknownPrompt(f"prompt {request.prompt_id!r} has no ranking yet: call Resolve")
            return common_pb2.Ranking(prompt_id=request.prompt_id, rank=resolved.rank)

        return self._run(context, work)


SERVICE = "cheems.v1.AnnotationService"


def host(engine: Engine, config: HostConfig) -> GrpcHost:
    """The servicer on a GrpcHost (health, reflection), serving as soon as it is started."""
    servicer = AnnotationServicer(AnnotationService(engine))
    grpc_host = GrpcHost(
        config, lambda server: annotation_pb2_grpc.add_AnnotationServiceServicer_to_server(servicer, server), [SERVICE]
    )
    grpc_host.set_serving(True)
    return grpc_host


def serve(db: str, config: HostConfig, on_ready: Callable[[int], None] | None = None) -> None:
    """`cheems service annotation`: expects a migrated database (`cheems db upgrade`), runs until SIGTERM.

    `on_ready(port)` runs once the server listens (the port bound, which config.port 0 leaves open).
    """
    from services.store.db import StoreConfig, create_engine_for

    grpc_host = host(create_engine_for(StoreConfig(db)), config).start()
    log.info("annotation serving on %s:%d", config.host, grpc_host.port)
    if on_ready is not None:
        on_ready(grpc_host.port)
    grpc_host.wait_for_signal()
