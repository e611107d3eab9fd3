"""The scoring service: validation, tokenization, backend call, timings. Transport-free.

Both the gRPC servicer and the HTTP app call `Scorer.score`; they only decode and encode.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.scorer.backends import Backend
from services.scorer.config import ScorerConfig
from services.scorer.errors import DeadlineExceeded
from services.scorer.metrics import ScorerMetrics
from services.scorer.scoring import best_index, make_job, query_text, tokenize_job


@dataclass(frozen=True)
class Scores:
    scores: list[float]
    best_index: int
    truncated: list[bool]
    queue_ms: float
    inference_ms: float
    total_ms: float


class Scorer:
    def __init__(self, config: ScorerConfig, backend: Backend, tokenizer: Any, metrics: ScorerMetrics) -> None:
        self.config, self.backend, self.tokenizer, self.metrics = config, backend, tokenizer, metrics
        self._tokenizer_lock = threading.Lock()  # fast tokenizers are not safe across threads

    def score(
        self,
        prompt: str,
        responses: Sequence[str],
        system_prompt: str = "",
        history: Sequence[tuple[str, str]] = (),
        timeout: float | None = None,
    ) -> Scores:
        """Scores of `responses` to `prompt`; raises the scorer's errors for bad input or a failed backend."""
        started = time.perf_counter()
        job = make_job(prompt, responses, system_prompt, history, self.config.max_responses)
        with self._tokenizer_lock:
            encoded = tokenize_job(self.tokenizer, job, self.config.max_length, self.config.truncation_policy)
        values, inference_started = self._infer([e.input_ids for e in encoded], started, timeout)
        done = time.perf_counter()
        return Scores(
            values,
            best_index(values),
            [e.truncated for e in encoded],
            (inference_started - started) * 1e3,
            (done - inference_started) * 1e3,
            (done - started) * 1e3,
        )

    def score_queries(self, queries: Sequence[str], timeout: float | None = None) -> list[float]:
        """OpenRLHF's remote-RM call: each query is a prompt and response already templated."""
        eos = self.tokenizer.eos_token or ""
        texts = [query_text(q, self.tokenizer.pad_token, eos) for q in queries]
        with self._tokenizer_lock:
            ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        values, _ = self._infer([list(x)[-self.config.max_length :] for x in ids], time.perf_counter(), timeout)
        return values

    def _infer(self, sequences: list[list[int]], started: float, timeout: float | None) -> tuple[list[float], float]:
        """Backend scores and the time inference started; DeadlineExceeded if no time is left."""
        inference_started = time.perf_counter()
        remaining = None if timeout is None else timeout - (inference_started - started)
        if remaining is not None and remaining <= 0:
            raise DeadlineExceeded("the deadline passed before inference started")
        self.metrics.queue.observe(inference_started - started)
        self.metrics.batch_size.observe(len(sequences))
        values = self.backend.score(sequences, remaining)
        self.metrics.responses.inc(len(sequences))
        return values, inference_started
