"""The soak's clients, each a thread calling a real gRPC API with its own account, as people and jobs do.

- ingest: one new prompt (five Chinese responses) per call of IngestionService.Ingest, `rate` a second; a failed
  call is retried with the same prompt until it is answered; acknowledged: the prompt's text.
- annotator: ListTasks (a few at a time), then SubmitAnnotation of each, retried with the same annotation_id
  until answered; acknowledged: the annotation id.
- score: RewardService.Score of a fixed prompt, as a scorer client; acknowledged: nothing (its errors are counted).
- evaluate: EvaluationService.StartRun on the bench every `every` seconds; acknowledged: the run id.
Every answer goes to the `Ledger`: OK calls, errors by status code, the longest stretch a client saw failing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import (
    annotation_pb2_grpc,
    common_pb2,
    evaluation_pb2,
    evaluation_pb2_grpc,
    ingestion_pb2,
    ingestion_pb2_grpc,
    reward_pb2,
    reward_pb2_grpc,
)
from services.channels import open_channel
from system.soak.ledger import Ledger

TIMEOUT = 15.0  # seconds a call may take: a killed service answers nothing, a restarted one answers again
TOPICS = ("光合作用", "牛顿第二定律", "区块链", "通货膨胀", "二分查找", "唐诗的格律", "量子纠缠", "免疫系统")
PROMPT_ID = "soak:prompt"


@dataclass(frozen=True)
class Endpoints:
    """Where the clients call and with whose tokens."""

    ingestion: str
    annotation: str
    scorer: str
    evaluation: str
    operator: str  # an operator's token: Ingest, StartRun
    scorer_client: str  # a scorer-client's token: Score
    annotators: dict[str, str]  # name -> token
    bench: str  # the bench file's name as the evaluation service knows it


def sample(n: int) -> common_pb2.Sample:
    """The n-th prompt of the soak: its own text, five responses of different quality (all Chinese)."""
    topic = TOPICS[n % len(TOPICS)]
    return common_pb2.Sample(
        prompt=f"第{n}题：请用通俗的语言解释{topic}的基本原理，并举一个生活中的例子。",
        responses=[
            common_pb2.Response(
                id="r1", content=f"{topic}的核心原理可以概括为三点。首先……其次……最后，例如在日常生活中……"
            ),
            common_pb2.Response(id="r2", content=f"{topic}是一个重要概念。简单来说，它描述了事物之间的关系，比如……"),
            common_pb2.Response(id="r3", content=f"关于{topic}，我只知道一点点：它很重要，但细节我不太清楚。"),
            common_pb2.Response(id="r4", content=f"{topic}？这个问题很难，建议查阅教科书或咨询老师。"),
            common_pb2.Response(id="r5", content=f"{topic}就是{topic}，没有什么可以解释的，大家都知道。"),
        ],
        category=["知识问答"],
        source="soak",
    )


# what a client retries: the service is away or busy (a refusal of the request itself is not retried)
TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
             grpc.StatusCode.ABORTED, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED}  # fmt: skip


def retry(stop: threading.Event, ledger: Ledger, client: str, call: Callable[[], Any], pause: float = 0.5) -> Any:
    """`call` until it answers (None once `stop` is set, or on a refusal that is no outage): each failure counted
    by its status code."""
    while not stop.is_set():
        try:
            reply = call()
        except grpc.RpcError as e:
            code = e.code() if callable(getattr(e, "code", None)) else None
            ledger.failed(client, code.name if code is not None else "UNKNOWN")
            if code not in TRANSIENT:
                return None
            stop.wait(pause)
            continue
        ledger.ok(client)
        return reply
    return None


def ingest(stop: threading.Event, ledger: Ledger, at: Endpoints, rate: float, first: int = 0) -> None:
    with open_channel(at.ingestion, token=at.operator) as channel:
        stub = ingestion_pb2_grpc.IngestionServiceStub(channel)
        n = first
        while not stop.wait(1.0 / rate):
            record = ingestion_pb2.IngestRecord(line=1, sample=sample(n))
            summary = retry(stop, ledger, "ingest", functools.partial(_ingest_one, stub, record))
            if summary is not None and summary.stored + summary.duplicates == 1:
                ledger.ack("samples", record.sample.prompt)
            elif summary is not None:
                ledger.failed("ingest", "REJECTED")  # the soak's own prompts are valid: a rejection is a finding
            n += 1


def _ingest_one(stub: ingestion_pb2_grpc.IngestionServiceStub, record: ingestion_pb2.IngestRecord) -> Any:
    return stub.Ingest(iter([record]), timeout=TIMEOUT)  # a fresh stream each try


def annotate(stop: threading.Event, ledger: Ledger, at: Endpoints, name: str) -> None:
    """One annotator: their tasks a few at a time, each judged r1 > r2 > r3 > r4 > r5 (the soak's gold order)."""
    with open_channel(at.annotation, token=at.annotators[name]) as channel:
        stub = annotation_pb2_grpc.AnnotationServiceStub(channel)
        listing = pb.ListTasksRequest(group_size=3, limit=3)
        while not stop.is_set():
            listed = retry(stop, ledger, "annotators", functools.partial(stub.ListTasks, listing, timeout=TIMEOUT))
            tasks = [] if listed is None else [t.task for t in listed.tasks]
            if not tasks:
                stop.wait(1.0)
            for task in tasks:
                submit(stop, ledger, stub, name, task)


def submit(
    stop: threading.Event, ledger: Ledger, stub: annotation_pb2_grpc.AnnotationServiceStub, name: str, task: Any
) -> None:
    request = pb.Annotation(
        annotation_id=f"soak:{name}:{task.task_id}",
        prompt_id=task.prompt_id,
        task_id=task.task_id,
        kind=pb.ANNOTATOR_KIND_HUMAN,
        order=pb.OrderResult(groups=[pb.TieGroup(ids=[r]) for r in sorted(task.response_ids)]),
    )
    while not stop.is_set():
        try:
            stub.SubmitAnnotation(request, timeout=TIMEOUT)
        except grpc.RpcError as e:
            code = e.code()
            ledger.failed("annotators", code.name)
            if code in (grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND):
                return  # the task went to someone else meanwhile (an operator, a lease that ran out): not ours
            stop.wait(0.5)
            continue
        ledger.ok("annotators")
        ledger.ack("annotations", request.annotation_id)
        return


def score(stop: threading.Event, ledger: Ledger, at: Endpoints, every: float) -> None:
    request = reward_pb2.ScoreRequest(
        prompt="请介绍一下长城。", responses=["长城是中国古代的伟大工程，全长两万多公里。", "不知道。"]
    )
    with open_channel(at.scorer, token=at.scorer_client) as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        while not stop.wait(every):
            try:
                reply = stub.Score(request, timeout=TIMEOUT)
            except grpc.RpcError as e:
                ledger.failed("score", e.code().name)
                continue
            ledger.ok("score") if len(reply.scores) == 2 else ledger.failed("score", "WRONG_ANSWER")


def evaluate(stop: threading.Event, ledger: Ledger, at: Endpoints, every: float) -> None:
    with open_channel(at.evaluation, token=at.operator) as channel:
        stub = evaluation_pb2_grpc.EvaluationServiceStub(channel)
        request = evaluation_pb2.StartRunRequest(bench_files=[at.bench], scorer_url=at.scorer)
        while not stop.wait(every):
            run = retry(stop, ledger, "evaluate", functools.partial(stub.StartRun, request, timeout=TIMEOUT), pause=2.0)
            if run is not None:
                ledger.ack("runs", run.run_id)


def start(stop: threading.Event, ledger: Ledger, at: Endpoints, rate: float, score_every: float, run_every: float,
          first: int = 0) -> list[threading.Thread]:  # fmt: skip
    """Every client on its own thread (daemon: a hung call never keeps the soak alive)."""
    jobs: list[tuple[str, Callable[[], None]]] = [("ingest", lambda: ingest(stop, ledger, at, rate, first))]
    jobs += [(f"annotator-{n}", functools.partial(annotate, stop, ledger, at, n)) for n in at.annotators]
    jobs.append(("score", lambda: score(stop, ledger, at, score_every)))
    if run_every:
        jobs.append(("evaluate", lambda: evaluate(stop, ledger, at, run_every)))
    threads = [threading.Thread(target=job, name=f"soak-{name}", daemon=True) for name, job in jobs]
    for thread in threads:
        thread.start()
    return threads
