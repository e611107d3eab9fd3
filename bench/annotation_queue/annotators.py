"""One annotator, as a client process: list their own tasks, order each one and submit it, until time is up.

Each annotator is a process of its own (`python -m annotation_queue.annotators`), not a thread: eight clients
parsing listings and building requests in one process would contend for its interpreter lock on two cores, and the
latencies would be the client's. It imports gRPC and the stubs only, so it starts in about a second. All start
together: each reads its `Plan` (one JSON line on stdin), connects, prints `ready`, and waits for a `go` line; then
loops until its time is up, and prints what it did (`Worked`, one JSON line on stdout):

    ListTasks(limit, group_size=3) as itself  ->  for each task: SubmitAnnotation(kind human, its task_id,
    a random order with ties over the task's three responses, a fresh annotation id)

back to back by default (the most load 8 people can make), or after `think` seconds of reading each task.

A submit that fails UNAVAILABLE or DEADLINE_EXCEEDED is sent again with the same annotation id (the service
answers a replay `created=False`), up to `retries` times. Every call carries a deadline and is recorded as
(rpc, start in seconds since `go`, seconds, status code name); the task ids each listing returned are kept, so the
parent can tell whether a task was handed to two people.

    echo '{"target": "127.0.0.1:50053", "token": "...", "name": "a1", "seconds": 60}' | \
        PYTHONPATH=.:bench python -m annotation_queue.annotators
    worked = annotate(stub, Plan("127.0.0.1:50053", token, "a1", seconds=60, limit=20))   # in-process: the test
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc

from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import annotation_pb2_grpc

RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
Call = tuple[str, float, float, str]  # rpc, start (s since `go`), seconds, status code name


@dataclass(frozen=True)
class Plan:
    target: str
    token: str
    name: str
    seconds: float
    limit: int = 20
    annotations: int = 0  # stop once this many are stored (0: only the clock stops it)
    deadline: float = 120.0
    retries: int = 3
    seed: int = 0
    think: float = 0.0  # seconds a person reads a task before submitting (0.5-1.5x this, at random)


@dataclass
class Worked:
    name: str
    calls: list[Call] = field(default_factory=list)
    listed: set[str] = field(default_factory=set)  # every task id its listings returned
    stored: int = 0  # annotations the service stored for it (created, or a retry's replay of one)
    empty: int = 0  # listings that returned nothing
    seconds: float = 0.0  # from `go` to its last call's end

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"listed": sorted(self.listed)}

    @classmethod
    def of_json(cls, data: dict[str, Any]) -> Worked:
        return cls(**data | {"calls": [tuple(c) for c in data["calls"]], "listed": set(data["listed"])})


def random_order(rng: random.Random, ids: list[str]) -> pb.OrderResult:
    """The ids best first, in tie groups: a valid order of every response of the task."""
    shuffled = rng.sample(ids, len(ids))
    groups: list[list[str]] = [[shuffled[0]]]
    for each in shuffled[1:]:
        if rng.random() < 0.2:
            groups[-1].append(each)  # tied with the one before
        else:
            groups.append([each])
    return pb.OrderResult(groups=[pb.TieGroup(ids=g) for g in groups])


class Client:
    def __init__(self, stub: Any, plan: Plan, worked: Worked, started: float) -> None:
        self.stub, self.plan, self.worked, self.started = stub, plan, worked, started
        self.metadata = [("authorization", f"Bearer {plan.token}")]

    def call(self, rpc: str, request: Any) -> Any:
        """The reply, or the RpcError; recorded either way."""
        begun = time.monotonic()
        try:
            reply, code = getattr(self.stub, rpc)(request, timeout=self.plan.deadline, metadata=self.metadata), "OK"
        except grpc.RpcError as e:
            reply, code = e, e.code().name
        self.worked.calls.append((rpc, begun - self.started, time.monotonic() - begun, code))
        return reply

    def listing(self) -> list[Any] | None:
        """The tasks listed; None when the call failed."""
        reply = self.call("ListTasks", pb.ListTasksRequest(group_size=3, limit=self.plan.limit))
        if isinstance(reply, grpc.RpcError):
            return None
        self.worked.listed.update(t.task.task_id for t in reply.tasks)
        return list(reply.tasks)

    def submit(self, task: Any, rng: random.Random) -> None:
        request = pb.Annotation(
            annotation_id=f"{self.plan.name}:{uuid.uuid4().hex}",
            prompt_id=task.task.prompt_id,
            task_id=task.task.task_id,
            kind=pb.ANNOTATOR_KIND_HUMAN,
            order=random_order(rng, list(task.task.response_ids)),
        )
        for attempt in range(self.plan.retries + 1):
            reply = self.call("SubmitAnnotation", request)
            if not isinstance(reply, grpc.RpcError):
                self.worked.stored += bool(reply.created) or attempt > 0  # a retry's replay: stored the first time
                return
            if reply.code() not in RETRIED:
                return


def annotate(stub: Any, plan: Plan) -> Worked:
    """The loop, from now until `plan.seconds` have passed (or `plan.annotations` are stored)."""
    worked, rng = Worked(plan.name), random.Random(f"{plan.seed}:{plan.name}")
    started = time.monotonic()
    client, end = Client(stub, plan, worked, started), started + plan.seconds

    def going() -> bool:
        return time.monotonic() < end and not (plan.annotations and worked.stored >= plan.annotations)

    while going():
        tasks = client.listing()
        if not tasks:
            worked.empty += tasks is not None
            time.sleep(0.2)  # nothing to do now (or a failed call): ask again shortly
            continue
        for task in tasks:
            if not going():
                break
            if plan.think:
                time.sleep(plan.think * rng.uniform(0.5, 1.5))
            client.submit(task, rng)
    worked.seconds = time.monotonic() - started
    return worked


def main() -> None:
    """The script: a plan on stdin, `ready` once connected, `go` from the parent, the `Worked` on stdout."""
    plan = Plan(**json.loads(sys.stdin.readline()))
    with grpc.insecure_channel(plan.target) as channel:
        grpc.channel_ready_future(channel).result(timeout=60)
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return  # the parent gave up
        worked = annotate(annotation_pb2_grpc.AnnotationServiceStub(channel), plan)
    print(json.dumps(worked.as_json()), flush=True)


if __name__ == "__main__":
    main()
