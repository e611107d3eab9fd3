"""Simulated people working the annotation queue over gRPC (ListTasks, SubmitAnnotation), on SQLite and PostgreSQL,
each signed in as an annotator account of their own; each takes at most one triple of a prompt, and too few of them
leave triples open and stop; a refusal ends the run as the kind of error its status stands for."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest
from sqlalchemy import Engine, select

from cheems import errors
from cheems.errors import InvalidInput
from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from cheems.roles import ANNOTATOR, OPERATOR
from services.annotation.server import servicer_host
from services.annotation.service import AnnotationService
from services.annotation.simulation.annotators import SimulationConfig, simulate_humans
from services.hosting import HostConfig
from services.store import repository
from services.store.accounts import AccountBook
from services.store.db import session_scope
from services.store.models import Annotation
from tests.services.accounts import Recorder, listening

ITEMS = [
    BenchItem(
        f"第{n}题：哪个回答最好？",
        tuple(Response(f"r{i}", f"第{n}题的回答{i}") for i in range(1, 6)),
        {"r1": 2, "r2": 1, "r3": 3, "r4": 3, "r5": 4},
        ("推理",),
    )
    for n in range(3)
]


@pytest.fixture
def target(engine: Engine) -> Iterator[tuple[str, AnnotationService]]:
    service = AnnotationService(engine)
    grpc_host = servicer_host(service, HostConfig(port=0), AccountBook(engine)).start()
    yield f"127.0.0.1:{grpc_host.port}", service
    grpc_host.stop(0)


def test_simulated_people_empty_the_queue_by_the_gold_ranks(
    target: tuple[str, AnnotationService], engine: Engine, account: Callable[[str, str], str]
) -> None:
    url, service = target
    people = [(f"sim-{n}", account(f"sim-{n}", ANNOTATOR)) for n in range(1, 6)]
    operator = account("ops", OPERATOR)
    prompts = []
    with session_scope(engine) as session:
        for item in ITEMS:  # stored under other keys than the bench's: matched by content
            responses = [(f"k{r.id}", r.content) for r in item.responses]
            prompts.append(repository.add_sample(session, item.input, responses, ["推理"])[0])
        stranger, _ = repository.add_sample(session, "题库里没有的题", [("a", "甲"), ("b", "乙"), ("c", "丙")], [])
    for pid in [*prompts, stranger]:
        service.create_tasks(pid, 3)
    few = simulate_humans(url, ITEMS, SimulationConfig(annotators=3, noise=0.0, seed=1), people, operator)
    # a prompt's five triples go to five different annotators: three do three of each, then stop
    assert (few.submitted, few.unknown, few.left) == (9, 1, 6)
    stats = simulate_humans(url, ITEMS, SimulationConfig(annotators=5, noise=0.0, seed=1), people, operator)
    assert (stats.submitted, stats.unknown, stats.left) == (6, 1, 0)  # the two new ones do the rest
    with session_scope(engine) as session:
        done = session.execute(select(Annotation.annotator, Annotation.prompt_id)).all()
    assert len(done) == 15 and len(set(done)) == 15  # nobody annotated two triples of one prompt
    for item, pid in zip(ITEMS, prompts, strict=True):
        ranking = service.ranking(pid)
        assert ranking is not None
        gold = {f"k{k}": v for k, v in item.rank.items()}
        assert all((ranking.rank[a] < ranking.rank[b]) == (gold[a] < gold[b]) for a in gold for b in gold)
    assert len(service.open_tasks(stranger)) == 1 and service.ranking(stranger) is None
    again = simulate_humans(url, ITEMS, SimulationConfig(annotators=2), people)
    assert (again.submitted, again.left) == (0, None)  # nothing counted without an operator's token
    with pytest.raises(InvalidInput, match="6 annotators need as many accounts, got 5"):
        simulate_humans(url, ITEMS, SimulationConfig(annotators=6), people)


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidInput),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceeded),
    ],
)
def test_a_refused_listing_ends_the_run_as_its_status_stands_for(code: grpc.StatusCode, kind: type) -> None:
    with listening(Recorder(refuse=code)) as port, pytest.raises(errors.CheemsError) as caught:
        simulate_humans(f"127.0.0.1:{port}", ITEMS, SimulationConfig(annotators=1), [("sim-1", "t")])
    assert type(caught.value) is kind and f"annotation service: {code.name}: refused" in str(caught.value)
