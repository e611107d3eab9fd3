"""OpenRLHF conformance: its remote reward-model client, written from its documented protocol, against
`cheems serve` started as production starts it (Triton backend, token from CHEEMS_SCORER_TOKEN).

OpenRLHF (`openrlhf/utils/remote_rm_utils.py`) posts `{"query", "prompts", "labels"}` with `requests`
and only a Content-Type header, raises on an HTTP error, and reads `rewards` (newer versions also
`scores` and `extra_logs`, each made a tensor of the batch's length). Queries are decoded rollouts:
the chat-templated prompt, left-padded to the batch, then the response, its eos and right pads. It
sends no Authorization header, so the token rides in the URL: `--remote_rm_url .../get_reward?token=`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import torch

from cheems.chat import Conversation, encode_many
from cheems.forward import forward_rewards
from cheems.model import load_model

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

TOKEN = "f3a9c1d7e5b2c8a04d6f1b3e9a7c5d2f"
PROMPTS = [
    "请用一句话介绍长城。",
    "把“春眠不觉晓”翻译成英文。",
    "一个三角形的内角和是多少度？",
    "推荐三本适合初学者的 Python 书。",
    "写一首关于秋天的五言绝句。",
]
ANSWERS = [
    "长城是中国古代修建的军事防御工程。",
    "不知道。",
    "This is 一个 mixed answer，中英混排。",
    "好的！以下是我的回答：首先，",
    "秋风起兮白云飞，草木黄落兮雁南归。",
]


def rollouts(tokenizer: Any, n: int) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(queries, prompts, (prompt, response) pairs) of `n` rollouts, decoded as OpenRLHF decodes them."""
    pad, eos = tokenizer.pad_token, tokenizer.eos_token
    pairs = [(PROMPTS[i % 5], ANSWERS[i % 5] + f"（第{i}个回答）" + "另外，" * (i % 9)) for i in range(n)]
    templated = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p, _ in pairs
    ]
    prompt_lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in templated]
    response_lengths = [len(tokenizer(r + eos, add_special_tokens=False)["input_ids"]) for _, r in pairs]
    queries = [
        pad * (max(prompt_lengths) - p_len) + t + r + eos + pad * (max(response_lengths) - r_len)
        for t, (_, r), p_len, r_len in zip(templated, pairs, prompt_lengths, response_lengths, strict=True)
    ]
    return queries, templated, pairs


def remote_rm(url: str, queries: list[str], prompts: list[str], labels: list[str]) -> dict[str, Any]:
    """What OpenRLHF's client does: one POST, JSON in and out, an HTTP error raised."""
    response = requests.post(
        url=url,
        json={"query": queries, "prompts": prompts, "labels": labels},
        headers={"Content-Type": "application/json"},
        timeout=180,
    )
    response.raise_for_status()
    reply = response.json()
    assert "rewards" in reply, reply
    return reply


def serving_line(serve: subprocess.Popen[bytes], log: Path, seconds: float = 180) -> str:
    """The `serving: ...` line the process prints once it listens (Triton prints to stdout too)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and serve.poll() is None:
        line = next((x for x in log.read_text(errors="replace").splitlines() if x.startswith("serving:")), "")
        if line:
            return line
        time.sleep(0.2)
    raise AssertionError(f"cheems serve did not start: {log.read_text(errors='replace')[-3000:]}")


def ready(url: str, seconds: float = 30) -> None:
    """Wait for /health to answer 200, as a readiness probe does."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if requests.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, f"{url}/health never answered 200"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def served(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`cheems serve` in its own process, its token from the environment; yields the HTTP base URL."""
    log = tmp_path_factory.mktemp("openrlhf") / "serve.log"
    command = [sys.executable, "-m", "cheems_cli", "serve", "--model", str(tiny_model), "--backend", "triton"]
    command += ["--grpc-port", "0", "--http-port", "0", "--host", "127.0.0.1", "--drain-seconds", "1"]
    env = {**os.environ, "CHEEMS_SCORER_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        serve = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        url = "http://" + serving_line(serve, log).split("HTTP ")[1].strip()
        ready(url)
        yield url
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()


def test_openrlhf_scores_a_rollout_batch_through_a_token_in_the_url(served: str, tiny_model: Path) -> None:
    model, tokenizer = load_model(tiny_model)
    queries, prompts, pairs = rollouts(tokenizer, 300)  # more than Triton's max batch of 64
    url = f"{served}/get_reward?token={TOKEN}"

    with pytest.raises(requests.HTTPError) as refused:  # the token is required: OpenRLHF's client gets 401
        remote_rm(f"{served}/get_reward", queries[:1], prompts[:1], [""])
    assert refused.value.response is not None and refused.value.response.status_code == 401

    reply = remote_rm(url, queries, prompts, [""] * len(queries))
    batch = [torch.tensor(reply["rewards"]), torch.tensor(reply["scores"])]
    batch += [torch.tensor(v) for v in reply["extra_logs"].values()]  # OpenRLHF logs each as a batch tensor
    assert all(t.shape == (300,) for t in batch) and set(reply["extra_logs"]) == {"query_tokens", "truncated"}
    assert reply["extra_logs"]["truncated"] == [0] * 300

    alone = [remote_rm(url, [q], [p], [""])["rewards"][0] for q, p in zip(queries, prompts, strict=True)]
    assert reply["rewards"] == pytest.approx(alone, abs=1e-4)

    some = pairs[:10]  # and the reward is the trained model's own, as the trainer computes it
    ids = [e.input_ids for e in encode_many(tokenizer, [Conversation(p, r) for p, r in some])]
    assert reply["rewards"][:10] == pytest.approx(forward_rewards(model.eval(), ids).tolist(), abs=1e-4)
    assert reply["extra_logs"]["query_tokens"][:10] == [len(i) for i in ids]
