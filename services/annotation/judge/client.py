"""The AI judge's side of the annotation service: open pair tasks, verdicts and closes over gRPC, as the judge's own
service account (a bearer token), never with the database's credentials.

    tasks = PairTasks(open_channel("127.0.0.1:50053", tls_credentials(ca), token=token))
    [task, *_] = tasks.open_pairs(100)     # ListTasks(group_size=2): open pairs, oldest first; claims nothing
    tasks.is_open(task)                    # still open? (its prompt's open pairs, listed again)
    tasks.submit(task, "ai-...", Relation("r1", "r2"))   # SubmitAnnotation, kind AI, on its task -> created?
    tasks.close(task, "inconsistent across orders")      # CloseTask: a pair without a verdict

What a call's status means to the judge (`outcome`): NOT_FOUND, ALREADY_EXISTS and FAILED_PRECONDITION say the task
is gone (another replica closed it, or stored another verdict under the same id): `Gone`, logged and left;
UNAVAILABLE and DEADLINE_EXCEEDED say the service is away for now: `errors.Unavailable`, the task asked again later;
anything else (UNAUTHENTICATED, PERMISSION_DENIED: a revoked or wrong account; INVALID_ARGUMENT) is raised as
`JudgeRefused`, and the process stops: no later call would do better.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from cheems import errors
from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import annotation_pb2_grpc
from services.annotation.algorithm.resolve import Relation

GONE = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION)
LATER = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class Gone(errors.Conflict):
    """The task closed meanwhile (another replica's verdict or close): nothing to do."""


class JudgeRefused(errors.CheemsError):
    """The annotation service refused the judge's account or request: the process stops (`reason`: the status)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class PairTask:
    """An open pair task and what the judge reads: the prompt, its category, the two responses in task order."""

    task_id: str
    prompt_id: str
    prompt: str
    category: tuple[str, ...]
    contents: dict[str, str]  # response key -> content, the pair's two


def outcome(error: grpc.RpcError, what: str) -> errors.CheemsError:
    """The judge's reading of a failed call (the module's table)."""
    message = f"annotation service, {what}: {error.code().name}: {error.details()}"
    if error.code() in GONE:
        return Gone(message)
    if error.code() in LATER:
        return errors.Unavailable(message)
    return JudgeRefused(message, error.code().name.lower())


class PairTasks:
    """The annotation service as the judge sees it; `timeout`: seconds per call."""

    def __init__(self, channel: grpc.Channel, timeout: float = 30.0) -> None:
        self.stub, self.timeout = annotation_pb2_grpc.AnnotationServiceStub(channel), timeout

    def open_pairs(self, limit: int) -> list[PairTask]:
        try:
            listed = self.stub.ListTasks(pb.ListTasksRequest(group_size=2, limit=limit), timeout=self.timeout)
        except grpc.RpcError as e:
            raise outcome(e, "listing the open pairs") from None
        return [
            PairTask(
                t.task.task_id, t.task.prompt_id, t.sample.prompt, tuple(t.sample.category),
                {r.id: r.content for r in t.sample.responses},
            )
            for t in listed.tasks
            if len(t.sample.responses) == 2
        ]  # fmt: skip

    def is_open(self, task: PairTask) -> bool:
        """Whether the pair is still open (another replica may have judged it since it was listed)."""
        request = pb.ListTasksRequest(prompt_id=task.prompt_id, group_size=2, limit=1000)
        try:
            listed = self.stub.ListTasks(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise outcome(e, f"the open pairs of prompt {task.prompt_id}") from None
        return any(t.task.task_id == task.task_id for t in listed.tasks)

    def submit(self, task: PairTask, annotation_id: str, relation: Relation) -> bool:
        """The verdict as an AI annotation of its task (under the account's own name); False for a replay."""
        verdict = pb.VERDICT_TIE if relation.tie else pb.VERDICT_A_BETTER
        request = pb.Annotation(
            annotation_id=annotation_id, prompt_id=task.prompt_id, task_id=task.task_id, kind=pb.ANNOTATOR_KIND_AI,
            pair=pb.PairResult(a=relation.better, b=relation.worse, verdict=verdict),
        )  # fmt: skip
        try:
            return bool(self.stub.SubmitAnnotation(request, timeout=self.timeout).created)
        except grpc.RpcError as e:
            raise outcome(e, f"the verdict on task {task.task_id}") from None

    def close(self, task: PairTask, reason: str) -> bool:
        """Close the pair without a verdict; False if it was closed already."""
        request = pb.CloseTaskRequest(task_id=task.task_id, reason=reason[:500])
        try:
            return bool(self.stub.CloseTask(request, timeout=self.timeout).closed)
        except grpc.RpcError as e:
            raise outcome(e, f"closing task {task.task_id}") from None
