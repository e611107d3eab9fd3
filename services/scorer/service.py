"""The scoring service: validation, tokenization, backend calls, deadlines, timings. Transport-free.

The gRPC servicer and the HTTP app call `Scorer`; they only decode and encode. Every call carries
one `Deadline`: tokenizing and each round of inference check it (and whether the caller is still
there), so work for a caller who has gone is dropped instead of computed. Every call leases the
model served now (`served.ModelSlot`) once and uses it to its end, so a switch (`cheems serve
--follow`) never mixes two models in one reply, and the reply names the model that scored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from cheems.chat import Encoded
from services.scorer.backends import preparing
from services.scorer.config import ScorerConfig
from services.scorer.deadline import Deadline, always
from services.scorer.errors import BackendUnavailable, ScorerError
from services.scorer.models.served import ModelSlot, ServedModel
from services.scorer.models.shelf import ModelShelf
from services.scorer.telemetry import Scored, ScorerMetrics
from services.scorer.telemetry.phases import CallClock, call_clock
from services.scorer.tokenization import ScoreJob, best_index, make_job, query_text, tokenize_job
from services.scorer.tokenization import tokenize_texts as tokenize_queries

ROUND = 4  # inference rounds hold this many Triton batches; the deadline and the caller are checked between


@dataclass(frozen=True)
class ScoreArgs:
    """One Score request as the transports decode it."""

    prompt: str
    responses: Sequence[str]
    system_prompt: str = ""
    history: Sequence[tuple[str, str]] = ()
    model: str = ""  # an id or an alias; "" = the default model


@dataclass(frozen=True)
class Scores:
    scores: list[float]
    best_index: int
    truncated: list[bool]
    queue_ms: float
    inference_ms: float
    total_ms: float
    model: str = ""  # the id of the model that scored


@dataclass(frozen=True)
class QueryScores:
    rewards: list[float]
    query_tokens: list[int]
    truncated: list[bool]
    model: str = ""


class Scorer:
    def __init__(
        self, config: ScorerConfig, models: ModelSlot, metrics: ScorerMetrics, shelf: ModelShelf | None = None
    ) -> None:
        """`models` holds the default model; `shelf` the others a call may name (only the default without it).
        Each call leases its model once and uses it to its end."""
        self.config, self.models, self.metrics = config, models, metrics
        self.shelf = shelf if shelf is not None else ModelShelf(models)
        self.unavailable = ""  # set while the backend is known to be down (the reason); calls fail fast

    @property
    def char_budget(self) -> int:
        """Characters a text may have before it is over `max_length` for certain (0 before a model is loaded)."""
        current = self.models.current
        return current.char_budget if current is not None else 0

    def deadline(self, remaining: float | None = None, is_active: Callable[[], bool] = always) -> Deadline:
        """The deadline of a call: the caller's, capped at `max_call_seconds`."""
        return Deadline.of(remaining, self.config.max_call_seconds, is_active)

    def score(self, args: ScoreArgs, deadline: Deadline | None = None) -> Scores:
        """Scores of one prompt's responses; raises the scorer's errors for bad input or a failed backend."""
        return self.score_many([args], deadline)[0]

    def score_many(self, items: Sequence[ScoreArgs], deadline: Deadline | None = None) -> list[Scores]:
        """Several prompts in one pass per model they name: each model's responses go to its backend together.

        An error in one item names it (`items[i]: ...`) when there is more than one."""
        deadline = deadline or self.deadline()
        out: dict[int, Scores] = {}
        for name in dict.fromkeys(item.model for item in items):  # each model once, in the order first named
            indexes = [i for i, item in enumerate(items) if item.model == name]
            for i, scores in zip(indexes, self._score_with(name, items, indexes, deadline), strict=True):
                out[i] = scores
        return [out[i] for i in range(len(items))]

    def _score_with(
        self, name: str, items: Sequence[ScoreArgs], indexes: list[int], deadline: Deadline
    ) -> list[Scores]:
        encoded: list[list[Encoded]] = []
        with self._lease(name) as model, call_clock() as clock:
            with preparing(model.backend):  # a batching backend waits (briefly) for calls still tokenizing
                for i in indexes:
                    deadline.check("tokenizing")
                    try:
                        encoded.append(self._tokenize(model, items[i]))
                    except ScorerError as e:
                        raise type(e)(f"items[{i}]: {e}" if len(items) > 1 else str(e)) from e
            flat = [e for job in encoded for e in job]
            inference_started = clock.tokenized()
            values = self._infer(model, [e.input_ids for e in flat], deadline)
            done = clock.inferred()
        lengths = [len(r) for i in indexes for r in items[i].responses]
        self._observe(model.ref.model_id, clock, flat, values, lengths)
        started = clock.started
        out, start = [], 0
        for job in encoded:
            scores = values[start : start + len(job)]
            start += len(job)
            out.append(
                Scores(
                    scores,
                    best_index(scores),
                    [e.truncated for e in job],
                    (inference_started - started) * 1e3,
                    (done - inference_started) * 1e3,
                    (done - started) * 1e3,
                    model.ref.model_id,
                )
            )
        return out

    def score_queries(
        self,
        queries: Sequence[str],
        deadline: Deadline | None = None,
        model_name: str = "",
        prompts: Sequence[str] | None = None,
    ) -> QueryScores:
        """OpenRLHF's remote-RM call: each query is a prompt and response already templated; `prompts`, when the
        call gives them, only tell the reward watch where each response begins (its length).

        The same length policy as Score: over max_length is an error, or cut when truncation is set."""
        deadline = deadline or self.deadline()
        with self._lease(model_name) as model, call_clock() as clock:
            eos = model.tokenizer.eos_token or ""
            texts = [query_text(q, model.tokenizer.pad_token, eos) for q in queries]
            deadline.check("tokenizing")
            with preparing(model.backend), model.tokenizers.lease() as tokenizer:
                encoded = tokenize_queries(
                    tokenizer, texts, self.config.max_length, self.config.truncation_policy, model.char_budget, "query"
                )
            clock.tokenized()
            values = self._infer(model, [e.input_ids for e in encoded], deadline)
            clock.inferred()
        self._observe(model.ref.model_id, clock, encoded, values, response_lengths(queries, prompts))
        return QueryScores(
            values, [len(e.input_ids) for e in encoded], [e.truncated for e in encoded], model.ref.model_id
        )

    def _observe(
        self, model_id: str, clock: CallClock, encoded: Sequence[Encoded], values: list[float], lengths: list[int]
    ) -> None:
        tokens = [len(e.input_ids) for e in encoded]
        scored = Scored(clock, tokens, sum(e.truncated for e in encoded), values, lengths)
        self.metrics.observe_scored(model_id, scored)

    def _lease(self, name: str = "") -> AbstractContextManager[ServedModel]:
        """The model this call uses from start to end; fails fast while the backend is known to be down."""
        if self.unavailable:
            raise BackendUnavailable(self.unavailable)
        return self.shelf.lease(name)

    def _tokenize(self, model: ServedModel, item: ScoreArgs) -> list[Encoded]:
        job: ScoreJob = make_job(
            item.prompt, item.responses, item.system_prompt, item.history, self.config.max_responses
        )
        config = self.config
        with model.tokenizers.lease() as tokenizer:
            return tokenize_job(tokenizer, job, config.max_length, config.truncation_policy, model.char_budget)

    def _infer(self, model: ServedModel, sequences: list[list[int]], deadline: Deadline) -> list[float]:
        """Backend scores in rounds; between rounds the deadline and the caller are checked."""
        if self.unavailable:
            raise BackendUnavailable(self.unavailable)
        step = self.config.max_batch_size * ROUND
        values: list[float] = []
        for start in range(0, len(sequences), step):
            deadline.check("inference")
            values += model.backend.score(sequences[start : start + step], deadline)
        return values


def response_lengths(queries: Sequence[str], prompts: Sequence[str] | None) -> list[int]:
    """Characters of each query's response: what follows its prompt when the query begins with it, else the whole
    query (OpenRLHF sends `prompts` beside `query`; other clients may not)."""
    if prompts is None or len(prompts) != len(queries):
        return [len(q) for q in queries]
    return [len(q) - len(p) if p and q.startswith(p) else len(q) for q, p in zip(queries, prompts, strict=True)]
