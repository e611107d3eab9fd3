"""Prefix sharing through the real scorer (gRPC Score and ScoreBatch, torch and Triton): every reward equals
the one a scorer with `prefix_sharing` off gives, to 1e-4 in fp32, over many shapes (lengths, system prompts
and history, truncation, one response, identical responses, responses that are prefixes of each other), and
for requests of several clients that Triton merged into one batch.

A spy on `cheems.forward.packed_rewards` (in this process: the torch backend and PyTriton's infer function
both run here) shows that rows were really packed, so an equality cannot hold only because nothing was shared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from cheems import forward
from cheems.chat import Conversation, encode_many
from cheems.model import load_model
from cheems.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from services.scorer.batching import bucket_length
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

Rows = list[list[int]]  # one packed forward: the lengths of each row's member sequences

HISTORY = [
    common_pb2.Message(role="user", content="长城在哪里？"),
    common_pb2.Message(role="assistant", content="在中国北方。"),
]
LONG_PROMPT = "请详细介绍长城的历史、修建过程和它在今天的意义。" * 6
CASES: dict[str, tuple[reward_pb2.ScoreRequest, bool]] = {  # name -> (request, whether rows are packed)
    "short": (reward_pb2.ScoreRequest(prompt="你好", responses=["你好！", "您好，有什么可以帮您？"]), True),
    "long prompt": (
        reward_pb2.ScoreRequest(prompt=LONG_PROMPT, responses=["长城很长。", "不知道。", "古代的防御工程。"]),
        True,
    ),
    "system and history": (
        reward_pb2.ScoreRequest(
            prompt="它有多长？",
            responses=["两万多公里。", "很长很长。", "大约21196公里，跨越15个省份。"],
            system_prompt="你是一个严谨的历史老师。",
            history=HISTORY,
        ),
        True,
    ),
    "one response": (reward_pb2.ScoreRequest(prompt=LONG_PROMPT, responses=["长城很长。"]), False),
    "identical": (reward_pb2.ScoreRequest(prompt="写一句诗。", responses=["春风又绿江南岸。"] * 4), True),
    "prefixes of each other": (
        reward_pb2.ScoreRequest(
            prompt="长城有多长？", responses=["长城", "长城很长", "长城很长很长", "长城很长很长，两万多公里。"]
        ),
        True,
    ),
    "empty, short and long": (reward_pb2.ScoreRequest(prompt="介绍长城。", responses=["", "好", "长城" * 40]), True),
    "mixed languages": (
        reward_pb2.ScoreRequest(
            prompt="Explain 长城 in one sentence.",
            responses=["The Great Wall 很长 very long。", "长城 is long.", "不知道"],
        ),
        True,
    ),
}


def stub(server: ScorerServer) -> Any:
    return reward_pb2_grpc.RewardServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"))


@pytest.fixture(scope="module")
def scorers(tiny_model: Path) -> Iterator[Callable[..., ScorerServer]]:
    """Scorers of the tiny model by config, each started once for the module (a Triton start costs seconds)."""
    started: dict[tuple[tuple[str, Any], ...], ScorerServer] = {}

    def get(**changes: Any) -> ScorerServer:
        key = tuple(sorted(changes.items()))
        if key not in started:
            config = ScorerConfig(model=str(tiny_model), host="127.0.0.1", grpc_port=0, http_port=-1, **changes)
            started[key] = ScorerServer(config).start()
        return started[key]

    yield get
    for server in started.values():
        server.stop(grace=1)


@pytest.fixture
def packed(monkeypatch: pytest.MonkeyPatch) -> list[Rows]:
    """Every packed forward run in this process while the test runs."""
    calls: list[Rows] = []
    real = forward.packed_rewards

    def spy(model: Any, sequences: Any, rows: Any, device: Any) -> Any:
        calls.append([[len(sequences[i]) for i in row.members] for row in rows])
        return real(model, sequences, rows, device)

    monkeypatch.setattr(forward, "packed_rewards", spy)
    return calls


def shared_server(backend: str, scorers: Callable[..., ScorerServer], request: pytest.FixtureRequest) -> ScorerServer:
    """Sharing on (the default): torch in process, or the session's Triton (started by PyTriton)."""
    server: ScorerServer = request.getfixturevalue("triton_server") if backend == "triton" else scorers(backend="torch")
    return server


def test_model_info_reports_the_setting(scorers: Callable[..., ScorerServer], triton_server: ScorerServer) -> None:
    def info(server: ScorerServer) -> reward_pb2.ModelInfo:
        return stub(server).GetModelInfo(reward_pb2.ModelInfoRequest(), timeout=10)

    assert info(scorers(backend="torch")).prefix_sharing is True  # the default
    assert info(scorers(backend="torch", prefix_sharing=False)).prefix_sharing is False
    assert info(triton_server).prefix_sharing is True


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("case", list(CASES))
def test_score_equals_unshared_scoring(
    backend: str,
    case: str,
    scorers: Callable[..., ScorerServer],
    packed: list[Rows],
    request: pytest.FixtureRequest,
) -> None:
    call, shares = CASES[case]
    plain = stub(scorers(backend="torch", prefix_sharing=False)).Score(call, timeout=60)
    assert packed == [], "sharing off packed a row"
    reply = stub(shared_server(backend, scorers, request)).Score(call, timeout=60)
    assert list(reply.scores) == pytest.approx(list(plain.scores), abs=1e-4)
    assert bool(packed) == shares, packed
    if shares:
        assert sum(len(row) for rows in packed for row in rows) == len(call.responses)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_score_batch_equals_unshared_scoring(
    backend: str, scorers: Callable[..., ScorerServer], packed: list[Rows], request: pytest.FixtureRequest
) -> None:
    calls = [call for call, _ in CASES.values()]
    calls += calls[:2]  # the same prompt twice in one batch: its rows may take members of both items
    plain = [list(stub(scorers(backend="torch", prefix_sharing=False)).Score(c, timeout=60).scores) for c in calls]
    reply = stub(shared_server(backend, scorers, request)).ScoreBatch(
        reward_pb2.ScoreBatchRequest(items=calls), timeout=60
    )
    for result, expected in zip(reply.results, plain, strict=True):
        assert list(result.scores) == pytest.approx(expected, abs=1e-4)
    assert max(len(row) for rows in packed for row in rows) >= 4


@pytest.mark.parametrize("truncation", ["left", "right"])
def test_truncated_long_prompts_equal_unshared_scoring(
    truncation: str, scorers: Callable[..., ScorerServer], packed: list[Rows]
) -> None:
    """Left truncation cuts each sequence at its own place, so those of different lengths share less (or
    nothing) and those of one length share the rest; right truncation keeps the prompt: rewards are the
    unshared ones either way."""
    limits = {"max_length": 64, "truncation": truncation}
    calls = [
        reward_pb2.ScoreRequest(prompt=LONG_PROMPT, responses=["好", "长城很长。" * 3, "不知道。" * 12]),
        reward_pb2.ScoreRequest(prompt="它有多长？", responses=["两万多公里。", "很长。"], history=HISTORY * 6),
        reward_pb2.ScoreRequest(prompt="介绍长城。", responses=["长城" * 50, "长城" * 51, "长城" * 5]),
        reward_pb2.ScoreRequest(prompt=LONG_PROMPT, responses=["长城很长。", "长城很短。", "长城不长。"]),
    ]
    servers = [scorers(backend="torch", **limits)]
    if truncation == "left":
        servers.append(scorers(backend="triton", queue_delay_us=200_000, **limits))  # the merging Triton, below
    plain = stub(scorers(backend="torch", prefix_sharing=False, **limits))
    for server in servers:
        for call in calls:
            expected = plain.Score(call, timeout=60)
            reply = stub(server).Score(call, timeout=60)
            assert any(expected.truncated)
            assert list(reply.truncated) == list(expected.truncated)
            assert list(reply.scores) == pytest.approx(list(expected.scores), abs=1e-4)
    assert packed, "nothing was shared"


def test_requests_merged_across_clients_pack_per_prompt(
    scorers: Callable[..., ScorerServer], packed: list[Rows]
) -> None:
    """Six clients call at once, each with its own prompt; Triton (a long queue delay) merges their requests
    into one batch, whose forward packs one row per prompt; each client gets its unshared rewards."""
    limits = {"max_length": 64, "truncation": "left"}
    triton = scorers(backend="triton", queue_delay_us=200_000, **limits)
    plain = stub(scorers(backend="torch", prefix_sharing=False, **limits))
    calls = [
        reward_pb2.ScoreRequest(
            prompt=f"第{k}个问题：长城有多长？", responses=[f"回答{k}。", "两万多公里。", "很长。" * k]
        )
        for k in range(1, 7)
    ]
    expected = [list(plain.Score(c, timeout=60).scores) for c in calls]
    for _attempt in range(3):  # merging depends on arrival within the queue delay: try again if none merged
        packed.clear()
        got: dict[int, list[float]] = {}
        start = threading.Barrier(len(calls))

        def client(k: int, start: threading.Barrier = start, got: dict[int, list[float]] = got) -> None:
            s = stub(triton)
            start.wait()
            got[k] = list(s.Score(calls[k], timeout=60).scores)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(len(calls))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        for k, scores in enumerate(expected):
            assert got[k] == pytest.approx(scores, abs=1e-4), k
        if max(len(rows) for rows in packed) >= 2:
            break
    assert max(len(rows) for rows in packed) >= 2, f"no forward packed rows of two clients: {packed}"


def test_one_prompt_across_a_length_bucket_is_packed_in_one_request(
    triton_server: ScorerServer, tiny_model: Path, packed: list[Rows]
) -> None:
    """Responses whose sequences fall on both sides of a 512-token bucket still reach Triton in one request
    (`batching.requests`), so the forward packs them; sent by bucket they could not meet."""
    prompt, responses = "长城" * 480, ["好", "长城很长。" * 20]
    tokenizer = triton_server.models.current.tokenizer  # type: ignore[union-attr]
    lengths = [len(e.input_ids) for e in encode_many(tokenizer, [Conversation(prompt, r) for r in responses])]
    assert bucket_length(lengths[0]) < bucket_length(lengths[1]), lengths  # the case this test is about
    reply = stub(triton_server).Score(reward_pb2.ScoreRequest(prompt=prompt, responses=responses), timeout=60)
    assert [sorted(row) for rows in packed for row in rows] == [sorted(lengths)]
    model, _ = load_model(tiny_model)
    ids = [e.input_ids for e in encode_many(tokenizer, [Conversation(prompt, r) for r in responses])]
    assert list(reply.scores) == pytest.approx(forward.forward_rewards(model.eval(), ids).tolist(), abs=1e-4)
