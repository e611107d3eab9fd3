"""AI pairwise annotation (paper section 4.2): every pair of a prompt's responses judged by an LLM.

Each pair is shown in a random A/B order (seeded) with the paper's judge prompt; the answer is
parsed as A, B or C (C = no clear difference). An unparseable answer is asked again up to
`retries` times and then recorded as an error, never as a preference. With `both_orders`, each
pair is judged in both orders and only a verdict that agrees with itself is kept.

Backends: `OpenAICompatibleBackend` speaks the chat-completions protocol (vLLM, DashScope, OpenAI)
with timeouts, retries and a concurrency limit. Any object with `complete(prompt) -> str` works.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations
from typing import Any, Protocol

from cheems import errors
from cheems.credentials import hide_password
from services.annotation.algorithm.resolve import Relation
from services.annotation.judge.prompt import judge_prompt

log = logging.getLogger(__name__)


class JudgeError(errors.Unavailable):
    """The judge endpoint failed after its retries."""


class Verdict(StrEnum):
    A = "A"
    B = "B"
    TIE = "C"


_CONCLUSION = re.compile(r"conclusion[」\"'”]?\s*[:：]?\s*[「\"']?\s*([ABC])\b", re.IGNORECASE)
_LETTER = re.compile(r"(?<![A-Za-z])([ABC])(?![A-Za-z])")


def parse_verdict(text: str) -> Verdict | None:
    """A, B or C from a judge's answer; None when absent or ambiguous (e.g. both A and B named)."""
    cleaned = text.strip().strip("*`#").strip()
    match = _CONCLUSION.search(cleaned)
    if match:
        return Verdict(match.group(1).upper())
    letters = set(_LETTER.findall(cleaned))
    return Verdict(letters.pop()) if len(letters) == 1 else None


class ChatBackend(Protocol):
    def complete(self, prompt: str) -> str: ...


@dataclass
class OpenAICompatibleBackend:
    base_url: str  # e.g. http://localhost:8000/v1
    model: str
    api_key: str = ""
    timeout: float = 60.0
    max_retries: int = 3
    backoff: float = 0.5
    max_tokens: int = 16

    def complete(self, prompt: str) -> str:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0,
                "max_tokens": self.max_tokens,
            }
        ).encode()
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        url = self.base_url.rstrip("/") + "/chat/completions"
        for attempt in range(self.max_retries + 1):
            try:
                request = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                    return str(json.loads(reply.read())["choices"][0]["message"]["content"])
            except urllib.error.HTTPError as e:
                if (e.code not in (408, 429) and e.code < 500) or attempt == self.max_retries:
                    raise JudgeError(f"{hide_password(url)}: HTTP {e.code}: {e.read()[:200]!r}") from None
            except (urllib.error.URLError, TimeoutError, KeyError, json.JSONDecodeError) as e:
                if attempt == self.max_retries:
                    raise JudgeError(f"{hide_password(url)}: {hide_password(str(e))}") from None
            time.sleep(self.backoff * 2**attempt)
        raise AssertionError("unreachable")


class TransformersBackend:
    """A local generative judge: any causal LM checkpoint (safetensors), greedy decoding, one prompt at a time."""

    def __init__(self, model_dir: str, max_new_tokens: int = 8, device: str = "cpu") -> None:
        import threading

        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_dir)
        model: Any = AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True)
        self.model = model.to(device).eval()
        self.device, self.max_new_tokens = device, max_new_tokens
        self._lock = threading.Lock()  # generate() is not meant for concurrent calls on one model

    def complete(self, prompt: str) -> str:
        import torch

        messages = [{"role": "user", "content": prompt}]
        encoded: Any = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        ids = encoded["input_ids"].to(self.device)
        with self._lock, torch.no_grad():
            out = self.model.generate(
                ids, max_new_tokens=self.max_new_tokens, do_sample=False, pad_token_id=self.tokenizer.pad_token_id
            )
        return str(self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


@dataclass(frozen=True)
class JudgeConfig:
    retries: int = 2  # extra asks when the answer cannot be parsed
    both_orders: bool = False
    concurrency: int = 8
    seed: int = 0


@dataclass(frozen=True)
class PairJudgment:
    first: str  # key shown as answerA
    second: str  # key shown as answerB
    verdict: Verdict | None
    error: str = ""
    unavailable: bool = False  # the endpoint failed (ask again later), rather than answering nothing usable

    def relation(self) -> Relation | None:
        if self.verdict is Verdict.A:
            return Relation(self.first, self.second)
        if self.verdict is Verdict.B:
            return Relation(self.second, self.first)
        return Relation(self.first, self.second, tie=True) if self.verdict is Verdict.TIE else None


def ask(backend: ChatBackend, prompt: str, retries: int) -> tuple[Verdict | None, str]:
    """(verdict, error): retries unparseable answers; a backend failure raises JudgeError."""
    answer = ""
    for _ in range(retries + 1):
        answer = backend.complete(prompt)
        verdict = parse_verdict(answer)
        if verdict is not None:
            return verdict, ""
    return None, f"unparseable verdict after {retries + 1} tries: {answer[:80]!r}"


def judge_responses(
    query: str,
    responses: Sequence[tuple[str, str]],
    backend: ChatBackend,
    config: JudgeConfig = JudgeConfig(),
    category: str | None = None,
) -> list[PairJudgment]:
    """Judge all C(N, 2) pairs of (key, content) responses."""
    rng = random.Random(f"{config.seed}:{query}")
    content = dict(responses)
    orders = [pair if rng.random() < 0.5 else pair[::-1] for pair in combinations([k for k, _ in responses], 2)]

    def one(order: tuple[str, str]) -> PairJudgment:
        a, b = order
        return judge_pair(query, (a, content[a]), (b, content[b]), backend, config, category)

    with ThreadPoolExecutor(max(1, config.concurrency)) as pool:
        return list(pool.map(one, orders))


MIRRORED = {Verdict.A: Verdict.B, Verdict.B: Verdict.A, Verdict.TIE: Verdict.TIE}


def judge_pair(
    query: str,
    first: tuple[str, str],
    second: tuple[str, str],
    backend: ChatBackend,
    config: JudgeConfig = JudgeConfig(),
    category: str | None = None,
) -> PairJudgment:
    """One pair of (key, content), `first` shown as answerA; with `both_orders` asked again swapped and kept
    only if the two verdicts agree. A failed endpoint gives a judgment marked `unavailable`."""
    (a, content_a), (b, content_b) = first, second
    try:
        verdict, error = ask(backend, judge_prompt(query, content_a, content_b, category), config.retries)
        if verdict is None or not config.both_orders:
            return PairJudgment(a, b, verdict, error)
        again, error = ask(backend, judge_prompt(query, content_b, content_a, category), config.retries)
    except JudgeError as e:
        return PairJudgment(a, b, None, str(e), unavailable=True)
    if again is None:
        return PairJudgment(a, b, None, error)
    if MIRRORED[again] != verdict:
        return PairJudgment(a, b, None, f"inconsistent across orders: {verdict} then {again} (swapped)")
    return PairJudgment(a, b, verdict)


@dataclass(frozen=True)
class BiasStats:
    judged: int
    errors: int
    ties: int
    position_a: float  # share of decisive verdicts for the answer shown first (0.5 = no position bias)
    longer: float  # share of decisive verdicts, between answers of different length, for the longer one


def bias_stats(judgments: Sequence[PairJudgment], lengths: dict[str, int]) -> BiasStats:
    decisive = [j for j in judgments if j.verdict in (Verdict.A, Verdict.B)]
    first_wins = sum(j.verdict is Verdict.A for j in decisive)
    unequal = [j for j in decisive if lengths[j.first] != lengths[j.second]]
    longer_wins = sum((lengths[j.first] > lengths[j.second]) == (j.verdict is Verdict.A) for j in unequal)
    return BiasStats(
        judged=len(judgments),
        errors=sum(j.verdict is None for j in judgments),
        ties=sum(j.verdict is Verdict.TIE for j in judgments),
        position_a=first_wins / len(decisive) if decisive else float("nan"),
        longer=longer_wins / len(unequal) if unequal else float("nan"),
    )
