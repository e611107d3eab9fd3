"""The HTTP adapter over a real uvicorn: body limits, client errors as 400 JSON, auth, truncation, errors."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from cheems.chat import Conversation, encode_many
from cheems.forward import forward_rewards
from cheems.model import load_model
from cheems.processes.ports import free_port
from services.scorer.runtime import ScorerServer
from tests.services.observe.scrape import parse, promtool_problems, sample_value
from tests.services.scorer.conftest import running

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

PROMPT = "请用一句话介绍长城。"
RESPONSES = ["长城是中国古代修建的军事防御工程，绵延上万里。", "不知道。", "The Great Wall 很长 very long。"]
PAD = "<|endoftext|>"


LISTENING: set[int] = set()


def base(server: ScorerServer) -> str:
    """The server's URL, once its port accepts connections: `ScorerServer.start()` returns before
    uvicorn listens (a race in server.py, reported), so the first call may be refused otherwise."""
    deadline = time.monotonic() + 10
    while server.http_port not in LISTENING:
        try:
            socket.create_connection(("127.0.0.1", server.http_port), timeout=1).close()
            LISTENING.add(server.http_port)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, f"nothing listens on HTTP port {server.http_port}"
            time.sleep(0.05)
    return f"http://127.0.0.1:{server.http_port}"


def post(
    server: ScorerServer, path: str, body: Any, token: str = "", query: str = "", timeout: float = 60
) -> tuple[int, Any]:
    """(status, JSON reply); asserts every reply, error or not, is JSON."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    url = f"{base(server)}{path}{query}"
    reply = requests.post(url, data=data, headers=headers, timeout=timeout)
    assert reply.headers["content-type"] == "application/json", (reply.status_code, reply.text[:300])
    return reply.status_code, reply.json()


def get(server: ScorerServer, path: str) -> requests.Response:
    return requests.get(f"{base(server)}{path}", timeout=30)


def raw_post(server: ScorerServer, head: str, parts: list[bytes]) -> tuple[int, Any]:
    """Send headers and some body bytes over a socket, then read the reply without sending the rest."""
    base(server)
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=10) as sock:
        sock.sendall(
            f"POST /get_reward HTTP/1.1\r\nhost: scorer\r\ncontent-type: application/json\r\n{head}\r\n".encode()
        )
        for part in parts:
            sock.sendall(part)
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        return reply.status, json.loads(reply.read())


def templated(tokenizer: Any, prompt: str, response: str) -> str:
    messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
    return tokenizer.apply_chat_template(messages, tokenize=False)


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> Any:
    return load_model(tiny_model)[1]


@pytest.fixture(scope="module")
def small_server(tiny_model: Path) -> Iterator[ScorerServer]:
    """Torch backend with a 4 KiB body limit and at most 5 queries per call."""
    yield from running(tiny_model, backend="torch", max_message_bytes=4096, max_queries=5)


# --- OpenRLHF's request, and the reply's shape


def test_openrlhf_get_reward_with_the_exact_json_it_sends(
    triton_server: ScorerServer, tiny_model: Path, tokenizer: Any
) -> None:
    """OpenRLHF's remote RM client posts full prompt+response texts (templated by the policy)."""
    texts = [templated(tokenizer, PROMPT, r) for r in RESPONSES]
    prompts = [t[: t.rindex("<|im_start|>assistant")] for t in texts]
    body = {"query": [t + PAD for t in texts], "prompts": prompts, "labels": ["", "", ""]}
    status, reply = post(triton_server, "/get_reward", body)
    assert status == 200
    assert set(reply) == {"rewards", "scores", "extra_logs"}
    model, _ = load_model(tiny_model)
    ids = [e.input_ids for e in encode_many(tokenizer, [Conversation(PROMPT, r) for r in RESPONSES])]
    expected = forward_rewards(model.eval(), ids).tolist()
    assert reply["rewards"] == pytest.approx(expected, abs=1e-5) and reply["scores"] == reply["rewards"]
    assert reply["extra_logs"] == {"query_tokens": [len(i) for i in ids], "truncated": [0, 0, 0]}


def test_left_padded_query_scores_as_the_unpadded_one(triton_server: ScorerServer, tokenizer: Any) -> None:
    text = templated(tokenizer, PROMPT, RESPONSES[0]).strip()
    status, reply = post(triton_server, "/get_reward", {"query": [text, PAD * 7 + text + PAD * 3]})
    assert status == 200
    assert reply["rewards"][1] == pytest.approx(reply["rewards"][0], abs=1e-5)
    assert reply["extra_logs"]["query_tokens"][0] == reply["extra_logs"]["query_tokens"][1]


# --- client errors are 400 JSON naming the field, and the server keeps serving

DEEP = 100_000


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        ({"query": "one string"}, "query must be a list of strings"),
        ({"query": []}, "query is empty"),
        ([1, 2], "JSON object"),
        ({"query": ["好", 3]}, "query[1] must be a string"),
        (b'{"query": ["ok", "\\ud800 tail"]}', "query[1]: lone surrogate \\ud800"),
        (b'{"query": ' + b"[" * DEEP + b"]" * DEEP + b"}", "query[0][0]"),
        (b'{"query": ["a"], "labels": [' + b"7" * 5000 + b"]}", "labels[0]: Exceeds the limit"),
        (b'{"query": ["\xe4\xbd\xa0\xff"]}', "not valid UTF-8"),
        ({"query": ["a", "b"], "prompts": ["a"]}, "prompts must be a list as long as query (2 items), got 1"),
        ({"query": ["a"], "labels": ["", ""]}, "labels must be a list as long as query (1 items), got 2"),
        ({"query": ["a"], "prompts": "a"}, "prompts must be a list as long as query"),
        (b'{"query": ["a"]} trailing', "extra data"),
        (b'{"query": ["a"], "labels": [{"\\ud800": [1 2]}]}', "labels[0].\\ud800: expected , or ]"),
    ],
)
def test_get_reward_bad_input(triton_server: ScorerServer, body: Any, message: str) -> None:
    status, reply = post(triton_server, "/get_reward", body)
    assert (status, reply["reason"]) == (400, "invalid_request") and message in reply["error"], reply
    assert post(triton_server, "/get_reward", {"query": ["好"]})[0] == 200


def test_nesting_is_reported_not_crashed_on(triton_server: ScorerServer) -> None:
    body = b'{"query": ["a"], "labels": [' + b"[" * DEEP + b"]" * DEEP + b"]}"
    status, reply = post(triton_server, "/get_reward", body)
    assert status == 400 and "nested deeper than" in reply["error"] and reply["error"].count("[0]") < 64


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt": "\ud800", "responses": ["好"]}, "prompt: lone surrogate"),
        ({"prompt": "你好", "responses": ["好", "坏\udfff"]}, "responses[1]: lone surrogate \\udfff at character 1"),
        ({"prompt": "你好", "responses": ["好"], "system_prompt": "\udc80"}, "system_prompt: lone surrogate"),
        ({"prompt": "你好", "responses": ["好"], "history": [["user", "嗨\ud83d"]]}, "history[0].content"),
        ({"prompt": "你好", "responses": ["好"], "system_prompt": 5}, "system_prompt must be a string"),
        ({"prompt": "你好", "responses": ["好"], "history": [["user"]]}, "history must be a list of"),
        ({"prompt": 1, "responses": ["好"]}, "prompt must be a string"),
        ({"prompt": "你好", "responses": "好"}, "responses must be a list of strings"),
    ],
)
def test_score_bad_input(triton_server: ScorerServer, body: Any, message: str) -> None:
    data = json.dumps(body).encode()  # json.dumps writes a lone surrogate as the escape "\ud800"
    status, reply = post(triton_server, "/score", data)
    assert (status, reply["reason"]) == (400, "invalid_request") and message in reply["error"], reply


def test_nul_characters_are_valid_text(triton_server: ScorerServer, tokenizer: Any) -> None:
    text = templated(tokenizer, "你好\x00", "世界\x00！")
    assert post(triton_server, "/get_reward", {"query": [text]})[0] == 200
    status, reply = post(triton_server, "/score", {"prompt": "你\x00好", "responses": ["\x00"]})
    assert status == 200 and len(reply["scores"]) == 1


# --- limits: body bytes, queries, length


def test_body_over_the_limit_is_refused_before_it_is_read(triton_server: ScorerServer) -> None:
    """100 MB announced, not one byte sent: the 413 comes at once (the body was not awaited)."""
    status, reply = raw_post(triton_server, "content-length: 100000000\r\n", [])
    assert (status, reply["reason"]) == (413, "limit_exceeded") and "max_message_bytes" in reply["error"]


def test_chunked_body_is_cut_off_once_over_the_limit(small_server: ScorerServer) -> None:
    chunks = [b"3e8\r\n" + b" " * 1000 + b"\r\n"] * 5  # 5000 bytes of a 4096-byte limit, and no last chunk
    status, reply = raw_post(small_server, "transfer-encoding: chunked\r\n", chunks)
    assert (status, reply["reason"]) == (413, "limit_exceeded")
    assert post(small_server, "/get_reward", {"query": ["好"]})[0] == 200


def test_content_length_over_the_limit(small_server: ScorerServer) -> None:
    status, reply = post(small_server, "/get_reward", {"query": ["好" * 2000]})
    assert (status, reply["reason"]) == (413, "limit_exceeded")


def test_too_many_queries(small_server: ScorerServer) -> None:
    status, reply = post(small_server, "/get_reward", {"query": ["好"] * 6})
    assert (status, reply["reason"]) == (413, "limit_exceeded") and "max_queries" in reply["error"]
    assert post(small_server, "/get_reward", {"query": ["好"] * 5})[0] == 200


def test_small_requests_flow_while_a_big_body_is_parsed(triton_server: ScorerServer) -> None:
    """50 MB of numbers takes `json.loads` seconds, holding the GIL (so a thread alone does not help)."""
    numbers = b",".join([b"0.5"] * 12_500_000)
    outcome: dict[str, Any] = {}

    def send_big() -> None:
        outcome["reply"] = post(triton_server, "/get_reward", b'{"query": ["a"], "labels": [' + numbers + b"]}")

    big = threading.Thread(target=send_big)
    big.start()
    answered = 0
    while big.is_alive():
        assert get(triton_server, "/health").status_code == 200
        answered += big.is_alive()  # answered while the big body was still being read or parsed
        time.sleep(0.01)
    big.join()
    # a parse holding the GIL for its seconds would let at most one check through; no latency bound is
    # asserted (these machines are noisy): `bench/scorer_bench.py --big-only` measures it
    assert answered >= 3, f"only {answered} health checks were answered while the big body was parsed"
    status, reply = outcome["reply"]
    assert (status, reply["reason"]) == (413, "limit_exceeded") and "JSON values" in reply["error"]


def test_a_big_valid_body_is_scored(triton_server: ScorerServer) -> None:
    labels = ["参考答案。" * 100_000] * 4  # 6 MB of labels next to small queries
    status, reply = post(triton_server, "/get_reward", {"query": ["好"] * 4, "labels": labels})
    assert status == 200 and len(reply["rewards"]) == 4


def test_truncation_is_flagged_in_extra_logs(truncating_server: ScorerServer, tokenizer: Any) -> None:
    long, short = templated(tokenizer, PROMPT, "好" * 200), templated(tokenizer, PROMPT, "好")
    status, reply = post(truncating_server, "/get_reward", {"query": [long, short]})
    assert status == 200
    assert reply["extra_logs"]["truncated"] == [1, 0] and reply["extra_logs"]["query_tokens"][0] == 48


def test_over_length_without_truncation_is_413(strict_server: ScorerServer, tokenizer: Any) -> None:
    body = {"query": [templated(tokenizer, PROMPT, "好"), templated(tokenizer, PROMPT, "好" * 200)]}
    status, reply = post(strict_server, "/get_reward", body, token="s3cret-Q7vK2mN9xR4tW8yB6pL3")
    assert (status, reply["reason"]) == (413, "limit_exceeded") and "query[1]" in reply["error"]


# --- auth


def test_auth_by_header_or_token_in_the_url(strict_server: ScorerServer) -> None:
    body = {"query": ["好"]}
    assert post(strict_server, "/get_reward", body) == (
        401,
        {"error": "missing or wrong token (bearer header or ?token=)", "reason": "unauthenticated"},
    )
    assert post(strict_server, "/get_reward", body, query="?token=nope")[0] == 401
    assert post(strict_server, "/get_reward", body, token="s3cre")[0] == 401
    assert post(strict_server, "/get_reward", body, token="s3cret-Q7vK2mN9xR4tW8yB6pL3")[0] == 200
    assert post(strict_server, "/get_reward", body, query="?token=s3cret-Q7vK2mN9xR4tW8yB6pL3")[0] == 200
    assert post(strict_server, "/get_reward", body, query="?x=1&token=s3cret-Q7vK2mN9xR4tW8yB6pL3&y=2")[0] == 200
    assert (
        post(
            strict_server, "/score", {"prompt": "你好", "responses": ["好"]}, query="?token=s3cret-Q7vK2mN9xR4tW8yB6pL3"
        )[0]
        == 200
    )
    assert get(strict_server, "/health").status_code == 200 and get(strict_server, "/metrics").status_code == 200


def test_the_token_in_the_url_never_reaches_the_access_log(strict_server: ScorerServer) -> None:
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    access = logging.getLogger("uvicorn.access")
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        assert (
            post(strict_server, "/get_reward", {"query": ["好"]}, query="?token=s3cret-Q7vK2mN9xR4tW8yB6pL3&x=1")[0]
            == 200
        )
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    assert any("/get_reward?x=1" in r for r in records), records
    assert not any("s3cret-Q7vK2mN9xR4tW8yB6pL3" in r for r in records), records


# --- errors of the backend and the deadline, metrics


def test_backend_down_is_503_and_deadline_is_504(tiny_model: Path) -> None:
    for server in running(tiny_model, backend="triton", triton_url=f"127.0.0.1:{free_port()}"):
        status, reply = post(server, "/get_reward", {"query": ["好"]})
        assert (status, reply["reason"]) == (503, "backend_unavailable")
    for server in running(tiny_model, backend="torch", max_call_seconds=1e-9):
        status, reply = post(server, "/score", {"prompt": "你好", "responses": ["好"]})
        assert (status, reply["reason"]) == (504, "deadline_exceeded")


def test_http_score_health_and_metrics(triton_server: ScorerServer) -> None:
    status, reply = post(triton_server, "/score", {"prompt": PROMPT, "responses": RESPONSES})
    assert status == 200 and len(reply["scores"]) == 3 and reply["truncated"] == [False] * 3
    assert post(triton_server, "/get_reward", {"query": ["好"]})[0] == 200
    assert post(triton_server, "/get_reward", {"query": []})[0] == 400
    health = get(triton_server, "/health")
    assert (health.status_code, health.json()) == (200, {"status": "SERVING"})
    text = get(triton_server, "/metrics").text
    model_id = triton_server.models.current.ref.model_id  # type: ignore[union-attr]
    assert f'cheems_scorer_requests_total{{api="Score",model_id="{model_id}",status="OK"}}' in text
    assert f'cheems_scorer_requests_total{{api="GetReward",model_id="{model_id}",status="OK"}}' in text
    assert 'cheems_scorer_requests_total{api="GetReward",model_id="",status="INVALID_ARGUMENT"}' in text
    assert "cheems_scorer_latency_seconds_bucket" in text and "cheems_scorer_batch_responses" in text


def test_http_requests_are_counted_by_route_on_its_metrics(small_server: ScorerServer) -> None:
    before = parse(get(small_server, "/metrics").text)
    assert post(small_server, "/get_reward", {"query": ["好"]})[0] == 200
    assert post(small_server, "/score", {"prompt": "你好"})[0] == 400
    assert get(small_server, "/no/such/path?token=secret").status_code == 404
    text = get(small_server, "/metrics").text
    after = parse(text)
    for method, path, status in [("POST", "/get_reward", 200), ("POST", "/score", 400), ("GET", "<unmatched>", 404)]:
        labels = {"method": method, "path": path, "status": str(status)}
        delta = sample_value(after, "http_requests_total", labels) - sample_value(before, "http_requests_total", labels)
        assert delta == 1, labels
    timed = {"method": "POST", "path": "/get_reward"}
    name = "http_request_duration_seconds_count"
    assert sample_value(after, name, timed) - sample_value(before, name, timed) == 1
    assert "/metrics" not in {s.labels.get("path") for f in after.values() for s in f.samples}
    assert promtool_problems(text) == ""
