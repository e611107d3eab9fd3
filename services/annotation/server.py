"""gRPC adapter of `cheems.v1.AnnotationService`: decode, call `AnnotationService`, encode; and the
`cheems service annotation` process (the server, plus the sample intake when given a broker, plus the
annotator's page over HTTP when given --http-port).

Bad input gets a status and stores nothing: unknown prompt, task or annotation -> NOT_FOUND; unknown response
ids, a malformed order or verdict, a ListTasks limit outside 1..1000 or annotator name over 128 characters, an
Export `name` that is not a plain file name (or any `path`: Export writes only in its export folder)
-> INVALID_ARGUMENT; a closed task, or an annotation id reused with other content -> FAILED_PRECONDITION.
ListTasks with an annotator offers only tasks they may take (none of a prompt they did their share of: an empty
list when only such tasks are open). A person's own ListTasks is the queue (`AnnotationService.assign`, under its
`QueueConfig`): what they hold, topped up to max_held (5), `limit` narrowing it; listing renews no lease. A human
SubmitAnnotation must name such a task, once (`submission`: the claim rule): no task_id INVALID_ARGUMENT, another's
PERMISSION_DENIED, one annotated already ALREADY_EXISTS, one taken by someone else after its lease ran out
FAILED_PRECONDITION.
ReassignTask and VoidAnnotation (operator or admin) correct annotation work, recorded with the caller's actor.
An AI annotation (a service account's) names an open pair task: none INVALID_ARGUMENT, a triple PERMISSION_DENIED
(`kinds`); CloseTask (service accounts only) closes a pair the judge could not decide, never a triple.

Every call names an account (`services.access`; roles in `cheems.roles`): UNAUTHENTICATED without a valid token,
PERMISSION_DENIED for a role that may not call the method, before the request is read. An annotation is stored
under the account that sends it, as the kind of its role (`submission.attribute`): naming another annotator or
the other kind is PERMISSION_DENIED, and an annotator's ListTasks lists their own tasks.

    grpc_host = host(engine, HostConfig(port=0), AccountBook(engine)).start()   # grpc_host.port
    service = AnnotationService(engine, queue=QueueConfig(people_per_prompt=8))   # a team of 8 finishes prompts
    grpc_host = servicer_host(service, HostConfig(port=0), AccountBook(engine)).start()
    serve("sqlite:///cheems.db", HostConfig(port=50053), bootstrap="localhost:9092")   # until SIGTERM
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import grpc
from kafka.errors import KafkaError
from sqlalchemy.engine import Engine

from cheems.credentials import hide_password
from cheems.errors import PermissionDenied
from cheems.v1 import annotation_pb2, annotation_pb2_grpc, common_pb2
from services.access import Authenticate, Guard, caller
from services.annotation.config import QueueConfig, TaskConfig
from services.annotation.events import BrokerUnavailable
from services.annotation.exports import ExportConfig
from services.annotation.intake import IntakeConfig, IntakeLoop, SampleIntake
from services.annotation.metrics import annotation_metrics
from services.annotation.service import AnnotationService, OpenTask
from services.annotation.submission import Submission, assigns, attribute, listed_for, submit
from services.annotation.web.app import create_app
from services.annotation.web.workbench import Workbench
from services.bus.client import Publisher
from services.bus.relay import RelayConfig
from services.grpc_errors import abort
from services.hosting import GrpcHost, Heartbeat, HostConfig, checked_handler
from services.store.errors import (
    InvalidRecord,
    StoreError,
    UnknownPrompt,
)
from services.web import HttpServer

log = logging.getLogger(__name__)
KINDS = {annotation_pb2.ANNOTATOR_KIND_HUMAN: "human", annotation_pb2.ANNOTATOR_KIND_AI: "ai"}
DEFAULT_LISTED = 100  # ListTasks' limit when the request gives none (a person's is max_held at most)


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
        except (StoreError, PermissionDenied) as e:
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
            annotator, kind = attribute(caller(), request.annotator, KINDS.get(request.kind, ""))
            submission = Submission(
                request.annotation_id,
                request.prompt_id,
                annotator,
                kind,
                result_of(request),
                list(request.discarded),
                request.task_id or None,
            )
            return annotation_pb2.SubmitAnnotationResponse(created=submit(self.service, submission))

        return self._run(context, work)

    def CloseTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            closed = self.service.close_task(request.task_id, request.reason, caller().actor)
            return annotation_pb2.CloseTaskResponse(closed=closed)

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
            if request.path:
                raise InvalidRecord(
                    "path: Export writes no server path; give name, a file name written in the service's export folder"
                )
            records, digest = self.service.export(request.kind, request.name, request.debias)
            return annotation_pb2.ExportResponse(records=records, sha256=digest, name=request.name)

        return self._run(context, work)

    def ListTasks(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            limit = request.limit or DEFAULT_LISTED
            who = caller()
            annotator = listed_for(who, request.annotator)  # given: only tasks of prompts independent of them
            if assigns(who, annotator):  # a person's own listing: what they hold, topped up to max_held
                assert annotator is not None
                tasks = self.service.assign(annotator, request.prompt_id or None, request.group_size, limit)
            else:
                tasks = self.service.open_tasks(request.prompt_id or None, request.group_size, limit, None, annotator)
            return annotation_pb2.ListTasksResponse(tasks=[open_task_message(t) for t in tasks])

        return self._run(context, work)

    def ReassignTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            actor = caller().actor
            previous = self.service.reassign(request.task_id, request.annotator, actor, request.reason)
            return annotation_pb2.ReassignTaskResponse(previous=previous or "")

        return self._run(context, work)

    def VoidAnnotation(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            prompt_id, voided = self.service.void(request.annotation_id, caller().actor, request.reason)
            return annotation_pb2.VoidAnnotationResponse(prompt_id=prompt_id, voided=voided)

        return self._run(context, work)

    def GetRanking(self, request: Any, context: grpc.ServicerContext) -> Any:
        def work() -> Any:
            resolved = self.service.ranking(request.prompt_id)
            if resolved is None:
                raise UnknownPrompt(f"prompt {request.prompt_id!r} has no ranking yet: call Resolve")
            return common_pb2.Ranking(prompt_id=request.prompt_id, rank=resolved.rank)

        return self._run(context, work)


SERVICE = "cheems.v1.AnnotationService"


def open_task_message(task: OpenTask) -> annotation_pb2.OpenTask:
    keys = list(task.contents)
    sample = common_pb2.Sample(
        prompt_id=task.prompt_id,
        prompt=task.prompt,
        system_prompt=task.system_prompt,
        history=[common_pb2.Message(role=role, content=content) for role, content in task.history],
        responses=[common_pb2.Response(id=k, content=c) for k, c in task.contents.items()],
        category=task.category,
        source=task.source,
    )
    return annotation_pb2.OpenTask(
        task=annotation_pb2.AnnotationTask(task_id=task.task_id, prompt_id=task.prompt_id, response_ids=keys),
        sample=sample,
    )


def host(
    engine: Engine,
    config: HostConfig,
    authenticate: Authenticate,
    publisher: Publisher | None = None,
    exports: ExportConfig | None = None,
    queue: QueueConfig | None = None,
) -> GrpcHost:
    """The servicer on a GrpcHost (health, reflection), serving as soon as it is started; `authenticate`: the
    accounts callers' tokens are checked against; `publisher`: announce annotations and rankings (see
    `AnnotationService`); `exports`: the folder Export writes in; `queue`: how work is handed out."""
    return servicer_host(AnnotationService(engine, publisher, exports=exports, queue=queue), config, authenticate)


def servicer_host(service: AnnotationService, config: HostConfig, authenticate: Authenticate) -> GrpcHost:
    servicer = AnnotationServicer(service)
    descriptor = annotation_pb2.DESCRIPTOR.services_by_name["AnnotationService"]
    # requests parsed by checked_handler: bytes gRPC cannot parse (invalid UTF-8) are INVALID_ARGUMENT, not INTERNAL
    grpc_host = GrpcHost(
        config,
        lambda server: server.add_generic_rpc_handlers((checked_handler(servicer, descriptor),)),
        [SERVICE],
        Guard(authenticate),
        annotation_metrics(service),
    )
    grpc_host.set_serving(True)
    return grpc_host


def serve(
    db: str,
    config: HostConfig,
    on_ready: Callable[[int, int | None], None] | None = None,
    bootstrap: str = "",
    intake: IntakeConfig | None = None,
    http_port: int = -1,
    queue: QueueConfig | None = None,
    tasks: TaskConfig | None = None,
    exports: ExportConfig | None = None,
) -> None:
    """`cheems service annotation`: expects a migrated database (`cheems db upgrade`), runs until SIGTERM.

    With `bootstrap`, annotations and rankings are announced on Kafka and the sample intake opens
    triple-wise tasks for new prompts, and pair tasks for the AI judge of those from `intake.ai_sources` (a thread;
    liveness follows its heartbeat). If the intake dies
    the process stops with BrokerUnavailable, to be restarted. With `http_port` >= 0 (0 = any free port)
    the annotator's page is served over HTTP on config.host (`web.app`), submitting through the same
    service. `queue`: how tasks are handed out, to ListTasks and the page alike (`QueueConfig`: max held, lease,
    people per prompt); `tasks`: the rule filter's thresholds and the share of triples annotated twice; `exports`:
    the folder Export writes its named files in.
    `on_ready(grpc port, http port or None)` runs once the servers listen.
    """
    from services.store.accounts import AccountBook
    from services.store.db import StoreConfig, create_engine_for

    engine, intake, relay = create_engine_for(StoreConfig(db)), intake or IntakeConfig(), RelayConfig()
    try:
        publisher = Publisher(bootstrap, max_block_ms=int(relay.ack_timeout * 1000)) if bootstrap else None
        service = AnnotationService(engine, publisher, relay, tasks, exports, queue)
        samples = SampleIntake(bootstrap, service, intake) if bootstrap else None
    except KafkaError as e:
        raise BrokerUnavailable(f"cannot reach the broker at {hide_password(bootstrap)}: {e!r}") from None
    grpc_host = servicer_host(service, config, AccountBook(engine)).start()
    http = None
    if http_port >= 0:
        http = HttpServer(create_app(Workbench(service), grpc_host.registry), config.host, http_port).start()
    loop = None
    if samples is not None:
        heartbeat = Heartbeat(grpc_host, intake.stale_after, readiness=False)
        loop = IntakeLoop(samples.consumer, heartbeat.beat, lambda: grpc_host.stop()).start()
        heartbeat.watch(loop.stopping)
    log.info("annotation serving on %s:%d%s", config.host, grpc_host.port, " with the sample intake" * bool(loop))
    if on_ready is not None:
        on_ready(grpc_host.port, http.port if http else None)
    try:
        grpc_host.wait_for_signal(on_stop=loop.stop if loop else None)
    finally:
        if http is not None:
            http.stop()
        _shut(loop, samples, service, publisher)
    if loop is not None and loop.error is not None:
        raise BrokerUnavailable(f"the sample intake stopped: {loop.error!r}")


def _shut(
    loop: IntakeLoop | None, samples: SampleIntake | None, service: AnnotationService, publisher: Publisher | None
) -> None:
    if loop is not None:
        loop.stop()
        loop.join()
    if samples is not None:
        samples.close()  # leaves the group at once, so its partitions move without a session timeout
    service.close()
    if publisher is not None:
        publisher.close(timeout=10)  # a broker that is down must not hold up the exit
