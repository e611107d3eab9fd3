"""Limits over real gRPC: malformed bytes, item/response/length limits (with their reason word), one deadline
shared by a whole ScoreBatch, cancelled callers, the server's cap on deadline-less calls, and one huge request
that must not stall everyone else."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.scorer.runtime import ScorerServer
from tests.services.scorer.conftest import running

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

AUTH = [("authorization", "Bearer s3cret-Q7vK2mN9xR4tW8yB6pL3")]  # strict_server's token
PROMPT = "请用一句话介绍长城。"
GOOD = reward_pb2.ScoreRequest(prompt="你好", responses=["你好！", "您好，有什么可以帮您？"])


def channel(server: ScorerServer) -> grpc.Channel:
    return grpc.insecure_channel(
        f"127.0.0.1:{server.grpc_port}",
        options=[("grpc.max_send_message_length", 64 * 1024 * 1024)],
    )


def stub(server: ScorerServer) -> Any:
    return reward_pb2_grpc.RewardServiceStub(channel(server))


def failure(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def reason(error: grpc.RpcError) -> str | None:
    return dict(error.trailing_metadata() or ()).get("cheems-error-reason")


def metric(server: ScorerServer, name: str, **labels: str) -> float:
    """A sample's value from the server's Prometheus text (0 when it has not appeared yet)."""
    assert server.scorer is not None
    text = server.scorer.metrics.render().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def big_batch(items: int, responses: int) -> reward_pb2.ScoreBatchRequest:
    return reward_pb2.ScoreBatchRequest(
        items=[
            reward_pb2.ScoreRequest(
                prompt=f"第{i}题：{PROMPT}", responses=[f"回答{j}：长城很长。" for j in range(responses)]
            )
            for i in range(items)
        ]
    )


@pytest.fixture(scope="module")
def wide_torch(tiny_model: Path) -> Iterator[ScorerServer]:
    """Torch backend that accepts a ScoreBatch big enough to take many seconds."""
    yield from running(tiny_model, backend="torch", max_batch_items=1000, max_responses=64)


# --- bytes that are not a request ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"\x0a\x02\xff\xfe", b"\x12\x05ab"],
    ids=["invalid-utf8-in-prompt", "truncated-responses"],
)
@pytest.mark.parametrize(("method", "message_type"), [("Score", "ScoreRequest"), ("ScoreBatch", "ScoreBatchRequest")])
def test_malformed_protobuf_is_invalid_argument(
    truncating_server: ScorerServer, raw: bytes, method: str, message_type: str
) -> None:
    if method == "ScoreBatch":  # the same bad bytes as the first item: field 1, length-delimited
        raw = b"\x0a" + bytes([len(raw)]) + raw
    with channel(truncating_server) as ch:
        rpc = ch.unary_unary(f"/cheems.v1.RewardService/{method}", request_serializer=None, response_deserializer=None)
        error = failure(lambda: rpc(raw, timeout=10))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert f"cheems.v1.{message_type}" in error.details()
        good = rpc(
            GOOD.SerializeToString()
            if method == "Score"
            else reward_pb2.ScoreBatchRequest(items=[GOOD]).SerializeToString(),
            timeout=10,
        )
        assert len(good) > 0


# --- limits and their reason word ---------------------------------------------------------------------------


def test_score_batch_over_max_batch_items(truncating_server: ScorerServer) -> None:
    s = stub(truncating_server)
    error = failure(lambda: s.ScoreBatch(reward_pb2.ScoreBatchRequest(items=[GOOD] * 129), timeout=30))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "129 items exceed the limit of 128" in error.details()
    assert reason(error) == "limit_exceeded"
    assert len(s.ScoreBatch(reward_pb2.ScoreBatchRequest(items=[GOOD] * 128), timeout=30).results) == 128


def test_empty_score_batch(truncating_server: ScorerServer) -> None:
    error = failure(lambda: stub(truncating_server).ScoreBatch(reward_pb2.ScoreBatchRequest(), timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "items is empty" in error.details()
    assert reason(error) == "invalid_request"


def test_too_many_responses(truncating_server: ScorerServer) -> None:
    request = reward_pb2.ScoreRequest(prompt="你好", responses=["好"] * 65)
    error = failure(lambda: stub(truncating_server).Score(request, timeout=10))
    assert (
        error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "65 responses exceed the limit of 64" in error.details()
    )
    assert reason(error) == "limit_exceeded"


def test_a_bad_item_of_a_batch_is_named(truncating_server: ScorerServer) -> None:
    items = [GOOD, reward_pb2.ScoreRequest(prompt="你好", responses=["好"] * 65)]
    error = failure(lambda: stub(truncating_server).ScoreBatch(reward_pb2.ScoreBatchRequest(items=items), timeout=10))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error.details().startswith("items[1]: ")
    assert reason(error) == "limit_exceeded"


def test_over_length_without_truncation(strict_server: ScorerServer) -> None:
    request = reward_pb2.ScoreRequest(prompt="你好", responses=["好", "好" * 200])
    error = failure(lambda: stub(strict_server).Score(request, timeout=10, metadata=AUTH))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "responses[1]" in error.details() and "over max_length 48" in error.details()
    assert reason(error) == "limit_exceeded"


def test_a_5mb_response_is_rejected_by_its_character_count(strict_server: ScorerServer) -> None:
    huge = "长城" * (5 * 1024 * 1024 // 6)  # 5 MB of UTF-8, far over 48 tokens x the longest token's characters
    request = reward_pb2.ScoreRequest(prompt="你好", responses=[huge])
    s = stub(strict_server)
    error = failure(lambda: s.Score(request, timeout=30, metadata=AUTH))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and reason(error) == "limit_exceeded"
    assert "is 5242878 bytes" in error.details() and "responses[0]" in error.details()  # refused before parsing
    assert s.Score(reward_pb2.ScoreRequest(prompt="你好", responses=["好"]), timeout=10, metadata=AUTH).scores


def test_a_response_over_the_character_budget_but_small_in_bytes_is_parsed_then_rejected(
    strict_server: ScorerServer,
) -> None:
    text = "长" * 7000  # 48 tokens x 128 = 6,144 characters allowed; 21,000 bytes is under 4 x 6,144
    request = reward_pb2.ScoreRequest(prompt="你好", responses=["好", text])
    error = failure(lambda: stub(strict_server).Score(request, timeout=30, metadata=AUTH))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and reason(error) == "limit_exceeded"
    assert "responses[1] is 7000 characters" in error.details()


# --- deadlines: one per call, dropped work, the server's cap --------------------------------------------------


def finished_batches(server: ScorerServer, status: str) -> float:
    return metric(server, "cheems_scorer_requests_total", api="ScoreBatch", status=status)


def ended(server: ScorerServer) -> float:
    """ScoreBatch calls the server ended because the caller's time ran out or the caller left."""
    return finished_batches(server, "DEADLINE_EXCEEDED") + finished_batches(server, "CANCELLED")


def test_score_batch_shares_one_deadline_and_drops_the_work(wide_torch: ScorerServer) -> None:
    request = big_batch(300, 64)
    before = metric(wide_torch, "cheems_scorer_responses_total")
    before_ended = ended(wide_torch)
    started = time.monotonic()
    error = failure(lambda: stub(wide_torch).ScoreBatch(request, timeout=1.0))
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # The server gives up on its own, not only the client: its call ends. It is recorded as CANCELLED today,
    # not DEADLINE_EXCEEDED (gRPC marks an expired call inactive, and `Deadline.check` asks that first; see
    # test_deadline.py), so either status counts here: this test is about the dropped work.
    wait_until(lambda: ended(wide_torch) > before_ended, "the server to end the call")
    assert time.monotonic() - started < 30
    time.sleep(2)  # rounds still running after the end would show up as responses
    assert metric(wide_torch, "cheems_scorer_responses_total") - before < 19_200 / 10
    assert finished_batches(wide_torch, "OK") == 0


def test_a_cancelled_caller_stops_the_work(wide_torch: ScorerServer) -> None:
    request = big_batch(300, 64)
    before = metric(wide_torch, "cheems_scorer_responses_total")
    cancelled = finished_batches(wide_torch, "CANCELLED")
    future = stub(wide_torch).ScoreBatch.future(request)  # no deadline: only the cancel can stop it
    time.sleep(1.0)
    assert future.cancel()
    wait_until(lambda: finished_batches(wide_torch, "CANCELLED") > cancelled, "the server to drop the call")
    time.sleep(2)
    assert metric(wide_torch, "cheems_scorer_responses_total") - before < 19_200 / 10
    assert finished_batches(wide_torch, "OK") == 0


def test_no_deadline_succeeds_on_torch(truncating_server: ScorerServer) -> None:
    reply = stub(truncating_server).Score(GOOD)  # no timeout: the server's max_call_seconds applies
    assert len(reply.scores) == 2


def test_no_deadline_succeeds_on_triton(triton_server: ScorerServer) -> None:
    reply = stub(triton_server).ScoreBatch(reward_pb2.ScoreBatchRequest(items=[GOOD, GOOD]))
    assert [len(r.scores) for r in reply.results] == [2, 2]


def test_max_call_seconds_caps_a_call_without_a_deadline(tiny_model: Path) -> None:
    request = big_batch(300, 64)
    with contextmanager(running)(tiny_model, backend="torch", max_batch_items=1000, max_call_seconds=0.5) as server:
        s = stub(server)
        error = failure(lambda: s.ScoreBatch(request))  # no deadline from the caller
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "max_call_seconds" in error.details() and reason(error) == "deadline_exceeded"
        assert serves_again(s)  # a short call fits in the cap once the abandoned batch has stopped


def serves_again(s: Any, within: float = 20.0) -> bool:
    """Whether a short Score succeeds within `within` seconds. The first may still meet the abandoned batch's last
    forward, and on a loaded two-core machine that can take longer than a cap as short as 0.5 s."""
    ends = time.monotonic() + within
    while True:
        try:
            return bool(s.Score(GOOD, timeout=10).scores)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED or time.monotonic() > ends:
                raise
            time.sleep(0.2)


# --- one huge request must not stall every client -------------------------------------------------------------


def test_a_request_over_max_message_bytes_is_refused_at_its_header_and_the_server_serves_on(
    strict_server: ScorerServer,
) -> None:
    s = stub(strict_server)  # the default limit, 16 MiB: a 20 MB message never reaches Python
    huge = reward_pb2.ScoreRequest(prompt="你好", responses=["长城很长。" * (20 * 1024 * 1024 // 15)])
    started = time.monotonic()
    error = failure(lambda: s.Score(huge, timeout=60, metadata=AUTH))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (error.details() or "")
    assert time.monotonic() - started < 30
    assert s.Score(GOOD, timeout=10, metadata=AUTH).scores


def test_one_huge_request_does_not_stall_small_ones(truncating_server: ScorerServer) -> None:
    s = stub(truncating_server)
    huge = reward_pb2.ScoreRequest(prompt="你好", responses=["长城很长。" * (20 * 1024 * 1024 // 15)])
    assert huge.ByteSize() > 20 * 1024 * 1024
    result: list[Any] = []
    errors: list[BaseException] = []

    def send_huge() -> None:
        try:
            result.append(s.Score(huge, timeout=120))
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    worker = threading.Thread(target=send_huge)
    worker.start()
    small = 0
    try:  # at least 10 small calls, and more for as long as the huge one is in flight, so they overlap it
        while small < 10 or (worker.is_alive() and small < 2000):
            reply = s.Score(reward_pb2.ScoreRequest(prompt=f"第{small}问", responses=["好的。"]), timeout=30)
            assert len(reply.scores) == 1 and list(reply.truncated) == [False]
            small += 1
    finally:
        worker.join(timeout=120)
    assert not worker.is_alive() and errors == []
    assert list(result[0].truncated) == [True] and len(result[0].scores) == 1
