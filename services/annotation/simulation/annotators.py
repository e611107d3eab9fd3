"""Simulated people for the demo: annotators working the annotation service's queue over gRPC.

Each annotator lists the open triple-wise tasks it may take (its own ListTasks, which assigns them: none of a
prompt it annotated, one per prompt, so a prompt's triples go to different annotators), orders each triple by the
gold ranks of bench files with adjacent swaps at rate `noise` (`simulate.human_order`, the model `cheems
annotate simulate` uses) and submits it (SubmitAnnotation, kind human), until no task it can judge is open to
it (or none has been for `idle_seconds`, for a queue still being filled). A prompt of five triples needs five
annotators (ten with every triple doubled); with fewer, its last triples stay open: the annotators stop, and
`left` counts those triples. A task is matched to the gold by prompt text
and response content, so the store's response keys need not be the bench's ids; tasks of prompts no
bench file holds are left alone. Annotators run concurrently, each in a thread with its own seeded
random stream; a task another one closed first is skipped (FAILED_PRECONDITION); any other refusal ends the run
as the kind of error its status stands for (`services.grpc_errors.error_of`). An annotation's id
is "<annotator>:<task id>", so running the simulation again stores nothing twice.

Each simulated person signs in with an annotator account of their own (`accounts`: name and token; the service
records the account as the annotator): the service lists them their own tasks only. `left` needs a listing of
every open task, so an operator's `token`; without one it is None.

    cheems annotate simulate-humans --annotation-url localhost:50053 --bench data/sample/open.jsonl --annotators 5 \
        --token-dir out/demo/accounts/annotators      # sim-annotator-1.token, ...: one account each
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import grpc

from cheems import errors
from cheems.formats.cheemsbench import BenchItem
from cheems.v1 import annotation_pb2 as pb
from cheems.v1 import annotation_pb2_grpc, common_pb2
from services.annotation.simulation.answers import human_order
from services.channels import open_channel
from services.grpc_errors import error_of

log = logging.getLogger(__name__)
T = TypeVar("T")
FIRST_WAIT, MAX_WAIT = 0.2, 2.0  # seconds between looks that find no task: doubled from the first up to the most


@dataclass(frozen=True)
class SimulationConfig:
    """annotators: how many work at once; noise: rate of adjacent swaps (and of split gold ties);
    idle_seconds: keep looking this long for new tasks once none is open; batch: tasks listed per look;
    timeout: seconds per gRPC call."""

    annotators: int = 5
    noise: float = 0.1
    seed: int = 0
    idle_seconds: float = 0.0
    batch: int = 1000
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.annotators < 1:
            raise ValueError(f"SimulationConfig.annotators must be >= 1, got {self.annotators}")
        if not 0.0 <= self.noise <= 1.0:
            raise ValueError(f"SimulationConfig.noise must be in [0, 1], got {self.noise}")
        if not 1 <= self.batch <= 1000:
            raise ValueError(f"SimulationConfig.batch must be in 1..1000, got {self.batch}")


@dataclass
class SimulationStats:
    submitted: int = 0  # annotations stored
    taken: int = 0  # tasks another annotator closed first
    unknown: int = 0  # open tasks of prompts no bench file holds (at an annotator's last look, the most of any)
    left: int | None = 0  # open triples of the bench's prompts when all stopped, each needing another annotator
    # (None: not counted, no operator token)


class Gold:
    """The bench files' ranks, found by prompt text and response content."""

    def __init__(self, items: Sequence[BenchItem]) -> None:
        self.ranks: dict[str, dict[str, int]] = {}
        for item in items:
            self.ranks.setdefault(item.input, {}).update({r.content: item.rank[r.id] for r in item.responses})

    def of(self, sample: common_pb2.Sample) -> dict[str, int] | None:
        """{response key: gold rank} of a listed task's responses; None if the bench does not know them all."""
        known = self.ranks.get(sample.prompt, {})
        ranks = {r.id: known[r.content] for r in sample.responses if r.content in known}
        return ranks if len(ranks) == len(sample.responses) else None


def simulate_humans(
    target: str,
    items: Sequence[BenchItem],
    config: SimulationConfig,
    accounts: Sequence[tuple[str, str]],
    token: str = "",
    credentials: grpc.ChannelCredentials | None = None,
) -> SimulationStats:
    """Annotate every open triple of the bench's prompts at `target` (host:port), each simulated person as one of
    `accounts` ((name, token), the first `config.annotators`); `token`: an operator's, to count what is left."""
    if len(accounts) < config.annotators:
        raise errors.InvalidInput(f"{config.annotators} annotators need as many accounts, got {len(accounts)}")
    gold, stats, lock = Gold(items), SimulationStats(), threading.Lock()
    with open_channel(target, credentials) as channel:
        stub = annotation_pb2_grpc.AnnotationServiceStub(channel)
        with ThreadPoolExecutor(config.annotators) as pool:
            people = accounts[: config.annotators]
            futures = [pool.submit(_annotate, stub, n, p, gold, config, stats, lock) for n, p in enumerate(people)]
            for future in futures:
                future.result()
        stats.left = sum(gold.of(t.sample) is not None for t in _list(stub, config, token).tasks) if token else None
    if stats.left:
        log.warning("%d triples left open: each needs an annotator who has not annotated its prompt", stats.left)
    return stats


def _list(
    stub: annotation_pb2_grpc.AnnotationServiceStub, config: SimulationConfig, token: str
) -> pb.ListTasksResponse:
    """The open triples the account of `token` may take (an operator's: every open triple)."""
    request = pb.ListTasksRequest(group_size=3, limit=config.batch)
    return _call(lambda: stub.ListTasks(request, timeout=config.timeout, metadata=bearer(token)))


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def one_per_prompt(tasks: list[tuple[pb.OpenTask, dict[str, int]]]) -> list[tuple[pb.OpenTask, dict[str, int]]]:
    """The first listed task of each prompt: the others of a prompt go to other annotators."""
    first: dict[str, tuple[pb.OpenTask, dict[str, int]]] = {}
    for task, ranks in tasks:
        first.setdefault(task.task.prompt_id, (task, ranks))
    return list(first.values())


def _annotate(
    stub: annotation_pb2_grpc.AnnotationServiceStub,
    n: int,
    account: tuple[str, str],
    gold: Gold,
    config: SimulationConfig,
    stats: SimulationStats,
    lock: threading.Lock,
) -> None:
    token, rng = account[1], random.Random(f"{config.seed}:{n}")
    idle_since, wait = time.monotonic(), FIRST_WAIT
    while True:
        listed = _list(stub, config, token)
        tasks = [(t, ranks) for t in listed.tasks if (ranks := gold.of(t.sample)) is not None]
        with lock:  # the tasks a listing assigned them stay theirs: the most any annotator saw at their last look
            stats.unknown = max(stats.unknown, len(listed.tasks) - len(tasks))
        if not tasks:
            if time.monotonic() - idle_since >= config.idle_seconds:
                return
            # an idle annotator looks less and less often (as the judge worker does): five of them looking every
            # 0.2 s through a long idle_seconds kept the annotation service busy answering empty listings
            time.sleep(min(wait, max(0.0, idle_since + config.idle_seconds - time.monotonic())))
            wait = min(wait * 2, MAX_WAIT)
            continue
        wait = FIRST_WAIT
        rng.shuffle(tasks)  # annotators spread over the queue rather than racing for its head
        for task, ranks in one_per_prompt(tasks):
            order = human_order(list(task.task.response_ids), ranks, rng, config.noise)
            submitted = _submit(stub, account, task.task, order, config)
            with lock:
                stats.submitted += submitted
                stats.taken += not submitted
        idle_since = time.monotonic()


def _submit(
    stub: annotation_pb2_grpc.AnnotationServiceStub,
    account: tuple[str, str],
    task: pb.AnnotationTask,
    order: list[list[str]],
    config: SimulationConfig,
) -> bool:
    (name, token) = account
    request = pb.Annotation(
        annotation_id=f"{name}:{task.task_id}",
        prompt_id=task.prompt_id,
        task_id=task.task_id,
        kind=pb.ANNOTATOR_KIND_HUMAN,  # the annotator is the account the call comes from
        order=pb.OrderResult(groups=[pb.TieGroup(ids=group) for group in order]),
    )
    try:
        return bool(stub.SubmitAnnotation(request, timeout=config.timeout, metadata=bearer(token)).created)
    except grpc.RpcError as e:
        if e.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS):  # taken meanwhile
            return False
        raise error_of(e, "annotation service") from None


def _call(call: Callable[[], T]) -> T:
    try:
        return call()
    except grpc.RpcError as e:
        raise error_of(e, "annotation service") from None
