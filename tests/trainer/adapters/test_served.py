"""The merged LoRA export served unchanged by `cheems serve`'s backends: the in-process torch backend and Triton
(started by PyTriton), each over real gRPC, give the adapter-wrapped model's rewards (float32: 1e-5, as the
scorer's backend parity tests hold them). vLLM serves the same kind of export in its own tests
(tests/services/scorer/vllm/test_real_engine.py: its model is a merged LoRA export, and tensor parallel 1 gives the
wrapped model's rewards), so no engine is started twice for it.

The model: the tiny RM at head_dim 32, LoRA-trained as lora.py makes it. One server at a time; the reference is
the trained, wrapped model itself, one sequence a forward.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch

from cheems.chat import Conversation, encode_many
from cheems.v1 import reward_pb2, reward_pb2_grpc
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from tests.trainer.adapters.lora import lora_model, rewards
from trainer.adapters.export import export_lora
from trainer.distributed import World

pytestmark = pytest.mark.slow  # a Triton server
ROOT = Path(__file__).resolve().parents[3]
LIMITS: dict[str, Any] = {"max_length": 512, "max_responses": 8, "host": "127.0.0.1", "grpc_port": 0, "http_port": 0}
BACKENDS: dict[str, dict[str, Any]] = {
    "torch": {"backend": "torch"},
    "triton": {"backend": "triton"},
}


def requests() -> list[reward_pb2.ScoreRequest]:
    items = [json.loads(line) for line in (ROOT / "data/sample/human.jsonl").open()][:4]
    return [reward_pb2.ScoreRequest(prompt=i["input"], responses=[r["content"] for r in i["responses"]]) for i in items]


@pytest.fixture(scope="module")
def trained(tiny_checkpoint: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(the merged export, the wrapped model's rewards of each request)."""
    peft_model, tokenizer = lora_model(tiny_checkpoint(hidden_size=128, layers=2, seed=3), seed=8)
    base = peft_model.base_model.model
    out = tmp_path_factory.mktemp("lora")
    model = export_lora(base, tokenizer, out, None, World(0, 1, 0, torch.device("cpu")))
    assert model is not None
    expected = []
    for request in requests():
        conversations = [Conversation(request.prompt, r) for r in request.responses]
        encoded = [[e.input_ids] for e in encode_many(tokenizer, conversations, max_length=512)]
        expected.append([rewards(base, sequence)[0] for sequence in encoded])  # one sequence a forward
    return model, expected


@pytest.fixture(scope="module", params=list(BACKENDS))
def server(request: pytest.FixtureRequest, trained: tuple[Path, Any]) -> Iterator[ScorerServer]:
    config = ScorerConfig(model=str(trained[0]), **BACKENDS[request.param], **LIMITS)
    running = ScorerServer(config).start()
    try:
        yield running
    finally:
        running.stop(grace=1)


def test_each_backend_serves_the_adapter_wrapped_models_rewards(
    server: ScorerServer, trained: tuple[Path, Any]
) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        for request, expected in zip(requests(), trained[1], strict=True):
            assert list(stub.Score(request, timeout=120).scores) == pytest.approx(expected, abs=1e-5), request.prompt
