"""Offline scoring: whole files of prompts on a device, in token-budget forwards across prompts.

    scoring = OfflineScoring(device="auto", dtype="auto", max_length=2048)
    rewards = score_jobs(jobs, "out/train-tiny/model", scoring)   # a list of rewards per job, in the jobs' order

What `cheems rewards --model` and the training service's distant supervision run. Each job (a prompt with its
responses, system prompt and history: `tokenization.ScoreJob`) is tokenized as the scorer tokenizes a Score call
(the shared chat template, left truncation at `max_length`), so its rewards are the scorer's. Jobs go in windows
of about `window_tokens` tokens, the next window tokenized in a thread while this one is scored; a window's
sequences, all its prompts together, are sorted by length into forwards of at most `max_batch_tokens` padded
tokens (`cheems.forward.score_rows`), and a prompt's responses are packed over their common prefix where the
model's cost on the device says it pays (`cheems.forward.plan`, one prompt at a time: nothing is packed across
prompts). The device, dtype and attention mean what they mean for `cheems serve` (`cheems.execution`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from cheems.chat import DEFAULT_MAX_LENGTH, Truncation
from cheems.execution import Execution, resolve_device
from cheems.forward import MAX_BATCH_TOKENS, plan, score_rows, side_by_side, split
from services.scorer.tokenization import ScoreJob, longest_token, tokenize_job

log = logging.getLogger(__name__)
T = TypeVar("T")
Window = list[list[list[int]]]  # consecutive jobs' token sequences, one list per job


@dataclass(frozen=True)
class OfflineScoring:
    device: str = "auto"  # auto: cuda when torch has CUDA here, else cpu; cpu, cuda, cuda:1 ...
    dtype: str = "auto"  # auto: bfloat16 on CUDA (float16 on cards without it), float32 on the CPU
    attention: str = "auto"  # transformers' attn_implementation; auto as `cheems serve` (`cheems.attention`)
    max_length: int = DEFAULT_MAX_LENGTH  # tokens per (prompt, response); longer ones lose their beginning
    max_batch_tokens: int = MAX_BATCH_TOKENS  # padded tokens of one forward
    max_sequences: int = 1024  # rows of one forward (the token budget is what binds at bench lengths)
    prefix_sharing: bool = True  # a prompt's responses packed over its common prefix where that is cheaper
    window_tokens: int = 2_000_000  # tokens tokenized ahead and sorted together (host memory: ~2 windows)

    def __post_init__(self) -> None:
        for name in ("max_length", "max_batch_tokens", "max_sequences", "window_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    def execution(self) -> Execution:
        """Device, dtype and attention resolved here (ConfigError, before anything loads, for one that cannot run)."""
        from cheems.attention import resolve_attention
        from cheems.precision import resolve_dtype

        device = resolve_device(self.device)
        dtype = resolve_dtype(self.dtype, device)
        attention = resolve_attention(self.attention, device)
        return Execution(device, dtype, self.prefix_sharing, self.max_sequences, self.max_batch_tokens, attention)


def score_jobs(
    jobs: Sequence[ScoreJob], model_dir: str | Path, scoring: OfflineScoring, progress: bool = True
) -> list[list[float]]:
    """Float32 rewards of every job's responses, in the jobs' order; `progress`: a tqdm bar of responses."""
    from cheems.model import load_model

    execution = scoring.execution()
    model, tokenizer = load_model(
        model_dir, execution.dtype, attn_implementation=execution.attention, device=execution.device
    )
    model = model.to(execution.device).eval()
    log.info("scoring %d prompts on %s in %s", len(jobs), execution.device, execution.dtype_name)
    return score_loaded(model, tokenizer, jobs, scoring, execution, progress)


def score_loaded(
    model: Any,
    tokenizer: Any,
    jobs: Sequence[ScoreJob],
    scoring: OfflineScoring,
    execution: Execution,
    progress: bool = True,
) -> list[list[float]]:
    """`score_jobs` with the model already loaded as `execution` says."""
    out: list[list[float]] = []
    total = sum(len(job.responses) for job in jobs)
    with tqdm(total=total, desc="score", unit="response", disable=not progress) as bar:
        for window in ahead(windows(tokenizer, jobs, scoring)):
            out += score_window(model, window, execution, bar.update)
    return out


def windows(tokenizer: Any, jobs: Sequence[ScoreJob], scoring: OfflineScoring) -> Iterator[Window]:
    """The jobs' token sequences (the scorer's tokenization, left-truncated), in windows of consecutive jobs
    holding at least `window_tokens` tokens (the last one fewer)."""
    budget = scoring.max_length * longest_token(tokenizer)
    window: Window = []
    tokens = 0
    for job in jobs:
        encoded = tokenize_job(tokenizer, job, scoring.max_length, Truncation.LEFT, budget)
        window.append([e.input_ids for e in encoded])
        tokens += sum(len(e.input_ids) for e in encoded)
        if tokens >= scoring.window_tokens:
            yield window
            window, tokens = [], 0
    if window:
        yield window


def score_window(
    model: Any, window: Window, execution: Execution, done: Callable[[int], object] | None = None
) -> list[list[float]]:
    """Rewards per job of a window: each job's rows planned on their own, all jobs' rows in shared forwards."""
    plans = [(seqs, plan(model, seqs, execution.share, execution.device)) for seqs in window]
    sequences, rows = side_by_side(plans)
    values = score_rows(
        model, sequences, rows, execution.max_sequences, execution.device, execution.max_tokens, done=done
    )
    return split(values, [len(seqs) for seqs in window])


def ahead(items: Iterator[T]) -> Iterator[T]:
    """`items` in order, the next one made in a thread while the caller works on this one (tokenizing the next
    window while the device scores this one)."""
    with ThreadPoolExecutor(1, thread_name_prefix="tokenize") as pool:
        pending = pool.submit(next, items, None)
        while (item := pending.result()) is not None:
            pending = pool.submit(next, items, None)
            yield item
