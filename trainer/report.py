"""What a training run tells the user: per-rank logging, progress, and the closing summary.

Rank 0 narrates at INFO: the data counts once the data is read (a warning too when responses were
dropped for length), progress while training, and a summary block at the end:

    INFO trainer.train: training done
      data: 87 responses read, 70 kept, 16 dropped over max_length 64, 1 dropped without a pair, ...
      trained 7 steps, final loss 0.5627, CheemsBench overall 0.3462
      model in out/train-tiny/model
      start-up 4.1 s to the first step: model 2.3 s, data 0.9 s, first step 0.9 s

Other ranks log warnings only, each line naming its rank (under torchrun), so torchrun's merged output says
each thing once. Progress is a tqdm bar on a terminal, else a `step N/M` line every `log_every` steps.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import TextIO

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from evaluator.metrics import EvalResult
from services.observe.logs import bind, setup_logging
from trainer.data import Dataset

LINES_PER_RUN = 20  # progress lines of a run whose log_every is 0
TRAINING_ID_ENV = "CHEEMS_TRAINING_ID"  # set by the training service's launcher: every line of the run carries it

log = logging.getLogger(__name__)


def configure_logging(rank: int | None, verbose: bool = False) -> None:
    """Rank 0 logs INFO, other ranks warnings only; every rank DEBUG when verbose (services.observe.logs: text or
    JSON as CHEEMS_LOG_FORMAT says). `rank`: torchrun's, shown on each line; None outside torchrun (rank 0).
    The training service's id for the run (CHEEMS_TRAINING_ID) is bound to every line."""
    level = logging.DEBUG if verbose else logging.INFO if not rank else logging.WARNING
    setup_logging("train", level=level, rank=rank)
    bind(training_id=os.environ.get(TRAINING_ID_ENV))


def describe_data(data: Dataset, max_length: int) -> str:
    """Every count of reading the training data: responses, pairs and prompts read, kept and dropped."""
    s = data.stats
    pairs, prompts = data.num_pairs, len(data.groups)
    return (
        f"{s.responses} responses read, {len(data.examples)} kept, "
        f"{s.dropped_responses} dropped over max_length {max_length}, "
        f"{s.unpaired_dropped} dropped without a pair, {s.truncated} truncated; "
        f"{pairs + s.dropped_pairs} pairs read, {pairs} kept, {s.dropped_pairs} dropped; "
        f"{prompts + s.dropped_prompts} prompts read, {prompts} kept, {s.dropped_prompts} dropped"
    )


def report_data(data: Dataset, max_length: int) -> None:
    log.info("data: %s", describe_data(data, max_length))
    s = data.stats
    if s.dropped_responses:
        log.warning(
            "%d of %d responses (%.0f%%) are longer than max_length %d tokens and were dropped with %d pairs; "
            "raise it (--set max_length=N) or truncate them instead (--set length_policy=left)",
            s.dropped_responses,
            s.responses,
            100 * s.dropped_responses / s.responses,
            max_length,
            s.dropped_pairs,
        )


def report_eval(step: int, result: EvalResult) -> None:
    subsets = " ".join(f"{n} acc {s.accuracy:.4f} exact {s.exact_match:.4f}" for n, s in result.subsets.items())
    log.info("eval at step %d: CheemsBench overall %.4f, %s", step, result.overall, subsets)


class Startup:
    """Where the time before training went: loading the model, reading and tokenizing the data, and the first
    step (set-up, compilation and warm-up included), each from the end of the one before."""

    def __init__(self) -> None:
        self.began = self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    @property
    def first_step(self) -> float | None:
        return self.phases.get("first_step")

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = now - self.last
        self.last = now

    def seconds(self) -> dict[str, float]:
        """Each phase's seconds and `total`, rounded for a log record."""
        return {**{k: round(v, 3) for k, v in self.phases.items()}, "total": round(self.last - self.began, 3)}

    def describe(self) -> str:
        parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f} s" for k, v in self.phases.items())
        return f"start-up {self.last - self.began:.1f} s to the first step: {parts}"


def summary(data: str, steps: int, loss: float, overall: float | None, model_dir: Path | None, resume: Path) -> str:
    """The closing block: what was read, what was trained, where the model (or the checkpoint) is."""
    trained = f"trained {steps} steps, final loss {loss:.4f}"
    if overall is not None:
        trained += f", CheemsBench overall {overall:.4f}"
    if model_dir is None:
        return f"training stopped\n  data: {data}\n  {trained}\n  checkpoint in {resume}; rerun to resume"
    return f"training done\n  data: {data}\n  {trained}\n  model in {model_dir}"


class Progress:
    """A tqdm bar on a terminal; elsewhere (logs, CI, pipes) a `step N/M` line every `every` steps.

    Used as a context manager: while the bar is shown, log lines are written above it.
    """

    def __init__(self, total: int, initial: int, enabled: bool, every: int = 0, stream: TextIO | None = None) -> None:
        stream = stream or sys.stderr
        self.total, self.initial, self.started = total, initial, time.perf_counter()
        self.every = every or max(1, total // LINES_PER_RUN)
        self.bar = (
            tqdm(total=total, initial=initial, desc="train", file=stream) if enabled and stream.isatty() else None
        )
        self.lines = enabled and self.bar is None
        self._redirect: contextlib.AbstractContextManager[None] = (
            logging_redirect_tqdm() if self.bar else contextlib.nullcontext()
        )

    def __enter__(self) -> Progress:
        self._redirect.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.close()
        self._redirect.__exit__(kind, error, tb)

    def due(self, step: int) -> bool:
        """Whether `step` gets a progress line (or the bar a new loss): the loop reads its figures then."""
        return step % self.every == 0 or step in (self.initial + 1, self.total)

    def update(self, step: int, epoch: int, loss: float | None, lr: float) -> None:
        """`loss` is None between logging steps (it is not read from the device there)."""
        if self.bar is not None:
            self.bar.update(1)
            if loss is not None:
                self.bar.set_postfix(loss=f"{loss:.4f}", epoch=epoch)
        elif self.lines and loss is not None and self.due(step):
            per_step = (time.perf_counter() - self.started) / (step - self.initial)
            left = tqdm.format_interval(per_step * (self.total - step))
            log.info(
                "step %d/%d  epoch %d  loss %.4f  lr %.2e  %.2f s/step  %s left",
                *(step, self.total, epoch, loss, lr, per_step, left),
            )
