"""The scorer with `--accounts` (torch backend, real gRPC and HTTP, SQLite and PostgreSQL): the store's accounts
allowed to score are taken beside the static `--token`, a role that does not score is PERMISSION_DENIED (HTTP 403)
naming the roles that do, a disabled account is refused at its next call, and health stays open; a relay waiting for
a broker that does not answer never holds up a Score call's token check."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import Engine

from cheems.roles import ANNOTATOR, OPERATOR, SCORER_CLIENT, SERVICE
from cheems.v1 import common_pb2, events_pb2, reward_pb2, reward_pb2_grpc
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.bus.codec import encode
from services.bus.relay import EventRelay, RelayConfig, RelayError
from services.scorer.runtime import ScorerServer
from services.store import outbox
from services.store.accounts import disable
from services.store.db import session_scope
from services.store.outbox import StoreOutbox
from tests.services.accounts import bearer
from tests.services.scorer.conftest import running

REQUEST = reward_pb2.ScoreRequest(prompt="你好", responses=["你好！", "嗯"])


@pytest.fixture
def scorer(tiny_model: Path, db_url: str, engine: Engine) -> Iterator[ScorerServer]:
    yield from running(
        tiny_model, backend="torch", accounts=True, db=db_url, token="static-s3cret-Q7vK2mN9xR4tW8yB6pL3-token"
    )


def score(server: ScorerServer, metadata: Any) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        try:
            reward_pb2_grpc.RewardServiceStub(channel).Score(REQUEST, metadata=metadata)  # no deadline
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def post(server: ScorerServer, token: str = "", query: str = "") -> tuple[int, Any]:
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    body = json.dumps({"query": ["你好"]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{server.http_port}/get_reward{query}", body, headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_accounts_that_score_are_taken_beside_the_static_token(
    scorer: ScorerServer, engine: Engine, account: Callable[[str, str], str]
) -> None:
    rlhf, worker, ops = account("grpo-run", SCORER_CLIENT), account("eval-worker", SERVICE), account("ops", OPERATOR)
    person = account("张三", ANNOTATOR)
    for token in (rlhf, worker, ops, "static-s3cret-Q7vK2mN9xR4tW8yB6pL3-token"):
        assert score(scorer, bearer(token)) == grpc.StatusCode.OK
        assert post(scorer, token)[0] == 200
    assert post(scorer, query=f"?token={rlhf}")[0] == 200  # OpenRLHF's way
    assert score(scorer, None) == score(scorer, bearer("nope-0123456789abcdef")) == grpc.StatusCode.UNAUTHENTICATED
    assert post(scorer)[0] == post(scorer, "nope-0123456789abcdef")[0] == 401
    assert score(scorer, bearer(person)) == grpc.StatusCode.PERMISSION_DENIED
    status, reply = post(scorer, person)
    assert (status, reply["reason"]) == (403, "permission_denied")
    assert reply["error"] == (
        "cheems.v1.RewardService/Score needs the role operator, admin, service or scorer-client; 张三 is annotator"
    )
    with session_scope(engine) as session:
        disable(session, "grpo-run")
    assert score(scorer, bearer(rlhf)) == grpc.StatusCode.UNAUTHENTICATED  # at once
    assert post(scorer, rlhf)[0] == 401
    with grpc.insecure_channel(f"127.0.0.1:{scorer.grpc_port}") as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    with urllib.request.urlopen(f"http://127.0.0.1:{scorer.http_port}/health", timeout=10) as reply:
        assert reply.status == 200


class Watched(Publisher):
    """A Publisher that says when a send began."""

    def __init__(self, bootstrap: str, max_block_ms: int) -> None:
        super().__init__(bootstrap, max_block_ms=max_block_ms)
        self.sending = threading.Event()

    def publish(self, topic: str, key: str, event: Any, context: Any = None) -> Any:
        self.sending.set()
        return super().publish(topic, key, event, context)


def drain(relay: EventRelay) -> None:
    with contextlib.suppress(RelayError):  # the broker did not answer in time: the event waits
        relay.drain()


def test_score_is_served_while_an_outbox_relay_waits_for_a_broker_that_does_not_answer(
    scorer: ScorerServer, engine: Engine, account: Callable[[str, str], str]
) -> None:
    """Issue 41: a relay held the SQLite write lock while it waited for the broker's acknowledgements; the
    scorer's per-call token check queued behind it and Score calls ended in DEADLINE_EXCEEDED."""
    rlhf = account("grpo-run", SCORER_CLIENT)
    with grpc.insecure_channel(f"127.0.0.1:{scorer.grpc_port}") as channel:  # warm: a first call's costs out of it
        reward_pb2_grpc.RewardServiceStub(channel).Score(REQUEST, metadata=bearer(rlhf), timeout=120)
    with EmbeddedBroker() as broker:
        broker.create_topics([topics.RANKINGS])
        publisher = Watched(broker.bootstrap, max_block_ms=5000)
        with session_scope(engine) as session:
            event = events_pb2.RankingEvent(ranking=common_pb2.Ranking(prompt_id="p", rank={"r1": 1}))
            outbox.add(session, topics.RANKINGS, "p", encode(topics.RANKINGS, event).value)
        assert broker.process is not None
        broker.process.send_signal(signal.SIGSTOP)  # it keeps its connections and answers nothing
        relay = EventRelay(StoreOutbox(engine), publisher, RelayConfig(ack_timeout=5.0))
        thread = threading.Thread(target=drain, args=(relay,), daemon=True)
        thread.start()
        try:
            assert publisher.sending.wait(30)
            with grpc.insecure_channel(f"127.0.0.1:{scorer.grpc_port}") as channel:
                stub = reward_pb2_grpc.RewardServiceStub(channel)
                assert len(stub.Score(REQUEST, metadata=bearer(rlhf), timeout=3).scores) == 2
            made: list[str] = []
            writer = threading.Thread(target=lambda: made.append(account("ops", OPERATOR)), daemon=True)
            writer.start()
            writer.join(3)  # another connection's write does not wait for the relay either
            assert made
        finally:
            broker.process.send_signal(signal.SIGCONT)
            thread.join(30)
            publisher.close(timeout=5)
