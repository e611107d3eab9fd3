"""Inference backends: token sequences in, one reward per sequence out.

- `TorchBackend`: the model in this process; concurrent calls share forwards (`batcher`), each forward in
  length groups (for places without Triton, and GPUs where the scorer runs the model itself).
- `TritonBackend`: a Triton server over gRPC (`tritonclient`): ours started by PyTriton
  (`triton.model`), or any Triton serving the same model signature. Sequences are padded up to
  a multiple of `batching.BUCKET` (512) tokens, so Triton's dynamic batcher can merge concurrent
  requests whose lengths fall in the same 512-token bucket, and sent in requests of at most
  Triton's `max_batch_size` rows (Triton rejects larger ones). With prefix sharing, sequences the
  model would pack into one row (one prompt's responses) travel in one request (`batching.requests`).

`prefix_sharing` says whether the model packs sequences that share a prefix (`cheems.packing`), and `dtype`
what it computes in (`cheems.precision`); GetModelInfo reports both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol, cast

import numpy as np

from cheems.execution import Execution
from cheems.forward import ForwardTokens, can_share, plan, score_rows, side_by_side, split
from cheems.packing import Cost, Row, plan_rows
from services.scorer.batcher import Batcher, BatchLimits, Work
from services.scorer.batching import requests
from services.scorer.deadline import NO_DEADLINE, Deadline
from services.scorer.errors import BackendUnavailable, DeadlineExceeded, ScorerError
from services.scorer.telemetry.phases import note_queue

log = logging.getLogger(__name__)


class Backend(Protocol):
    """What the scorer needs of a backend. A backend may also have `arriving()`, a context manager around a
    call's tokenizing (`preparing`), so that it can wait for calls about to come (the torch batcher)."""

    name: str

    @property
    def prefix_sharing(self) -> bool: ...

    @property
    def dtype(self) -> str: ...

    def ready(self) -> bool: ...

    def score(self, sequences: Sequence[Sequence[int]], deadline: Deadline | None = None) -> list[float]: ...

    def close(self) -> None: ...


def preparing(backend: Backend) -> AbstractContextManager[object]:
    """`backend.arriving()` where the backend batches calls itself, else nothing."""
    arriving = getattr(backend, "arriving", None)
    return arriving() if arriving is not None else nullcontext()


class TorchBackend:
    """The model in this process; concurrent calls share forwards (`batcher.Batcher`)."""

    name = "torch"

    def __init__(
        self, model_dir: str, execution: Execution | None = None, tokenizer: Any = None, queue_delay: float = 0.002
    ) -> None:
        """`execution`: device, dtype, prefix sharing and what a forward holds (default: float32 on the CPU,
        unshared); `tokenizer`: the checkpoint's, if loaded already (else it is loaded again); `queue_delay`:
        seconds a call may wait for calls still tokenizing (`batcher`)."""
        self.execution = execution = execution or Execution()
        self.model = execution.load(model_dir, tokenizer)
        self.prefix_sharing = execution.share and can_share(self.model)
        self.dtype = execution.dtype_name
        self.attention = execution.attention  # the kernel it runs, resolved for the device
        limits = BatchLimits(execution.max_sequences, execution.max_tokens, queue_delay)
        self.batcher = Batcher(self._run, limits, name=model_dir)
        self.on_forward: Callable[[ForwardTokens], object] | None = None  # what each forward held (metrics)

    def ready(self) -> bool:
        return self.model is not None

    def arriving(self) -> AbstractContextManager[None]:
        return self.batcher.arriving()

    def score(self, sequences: Sequence[Sequence[int]], deadline: Deadline | None = None) -> list[float]:
        """Rewards of `sequences`, in a forward shared with the calls queued beside them."""
        if self.model is None:
            raise BackendUnavailable("the model was closed (the scorer is stopping or switched models)")
        rows = plan(self.model, sequences, self.prefix_sharing, self.execution.device)
        work = Work(sequences, sum(r.length(sequences) for r in rows), rows)
        try:
            return self.batcher.submit(work, deadline or Deadline.of(None, NO_DEADLINE))
        finally:
            if work.started is not None:
                note_queue(work.started - work.arrived)  # the call's clock, when it keeps one (`telemetry.phases`)

    def _run(self, works: Sequence[Work]) -> list[list[float]]:
        """One batch: every call's rows side by side (each call's own plan), rewards split back per call."""
        model = self.model
        if model is None:
            raise BackendUnavailable("the model was closed (the scorer is stopping or switched models)")
        sequences, rows = side_by_side([(work.sequences, cast(list[Row], work.plan)) for work in works])
        execution = self.execution
        values = score_rows(
            model, sequences, rows, execution.max_sequences, execution.device, execution.max_tokens,
            stop=lambda: all(work.abandoned for work in works),  # nobody waits: the forwards left are dropped
            measure=self.on_forward,
        )  # fmt: skip
        return split(values, [len(work.sequences) for work in works])

    def close(self) -> None:
        self.batcher.close()  # queued calls fail as UNAVAILABLE, after the forward in progress
        self.model = None  # the memory goes now, not when the last reference to this backend does


# Failed inferences in a row after which a model counts as broken: a Python-backend stub (or what it started) that
# died leaves tritonserver up and every call of that model failing ("Stub process ... is not healthy", or
# UNAVAILABLE) until Triton is restarted. One success, or a restart, resets the count; a deadline is no failure.
BROKEN_AFTER = 3


class TritonBackend:
    name = "triton"

    def __init__(
        self,
        url: str,
        model_name: str,
        max_batch_size: int = 64,
        cost: Cost | None = None,
        prefix_sharing: bool | None = None,
        dtype: str | None = None,
    ) -> None:
        """`cost`: the model's (`Cost.of`), to keep the sequences it would pack in one request; None sends each
        to its length's bucket. `prefix_sharing` and `dtype`: how the Triton model runs; None asks Triton (the
        `prefix_sharing` and `dtype` parameters of its model config, which `triton.repository` writes)."""
        import tritonclient.grpc as triton_grpc

        self._grpc = triton_grpc
        self.model_name, self.max_batch_size = model_name, max_batch_size
        self.url = url
        self.client = triton_grpc.InferenceServerClient(url=url)
        self.cost = cost
        self.failures = 0  # inferences failed in a row, past their deadline or not (`broken`)
        self._generation = 0  # which server the failures are counted against (`reconnect` moves on)
        self._said: dict[str, str] = {}
        if prefix_sharing is not None:
            self._said["prefix_sharing"] = "on" if prefix_sharing else "off"
        if dtype is not None:
            self._said["dtype"] = dtype

    @property
    def prefix_sharing(self) -> bool:
        """Whether the Triton model packs sequences that share a prefix; False while Triton cannot be asked."""
        return self._parameter("prefix_sharing") == "on"

    @property
    def dtype(self) -> str:
        """The dtype the Triton model runs in; "" when its config does not say (a model exported elsewhere)."""
        return self._parameter("dtype")

    def _parameter(self, name: str) -> str:
        """A string parameter of the Triton model's config, asked once ("" while Triton cannot be asked)."""
        if name not in self._said:
            try:
                config = self.client.get_model_config(self.model_name, as_json=True, client_timeout=5)["config"]
            except Exception:
                return ""
            parameters = config.get("parameters", {})
            for key in ("prefix_sharing", "dtype"):
                self._said[key] = parameters.get(key, {}).get("string_value", "")
        return self._said[name]

    def reconnect(self, url: str) -> None:
        """Point at a restarted Triton; calls in flight on the old one fail as UNAVAILABLE."""
        old, self.url = self.client, url
        self.client = self._grpc.InferenceServerClient(url=url)
        self._generation += 1  # the old server's calls failing now count against nobody
        self.failures = 0
        old.close()

    def ready(self) -> bool:
        if self.broken():
            return False
        try:
            return bool(self.client.is_model_ready(self.model_name))
        except Exception:
            return False

    def broken(self) -> bool:
        """Whether the model's last BROKEN_AFTER inferences all failed: only a restart of Triton brings it back
        (the scorer's supervisor restarts it, as after a crash, `ServedModel.dead`)."""
        return self.failures >= BROKEN_AFTER

    def score(self, sequences: Sequence[Sequence[int]], deadline: Deadline | None = None) -> list[float]:
        """One Triton request per length bucket (`batching.BUCKET` tokens) and chunk of max_batch_size rows;
        with a `cost`, the sequences the model would pack together go in one request.

        All are in flight together. Without a `deadline` it waits as long as Triton takes."""
        timeout = deadline.remaining() if deadline is not None else None
        pending: list[tuple[list[int], Future[Any]]] = []
        client = self.client
        together = [r.members for r in plan_rows(sequences, self.cost) if len(r.members) > 1] if self.cost else []
        for padded, members in requests([len(s) for s in sequences], self.max_batch_size, together):
            pending.append((members, self._infer_async(client, self._rows(sequences, members, padded), timeout)))
        out = [0.0] * len(sequences)
        for members, future in pending:
            result = future.result()
            for i, v in zip(members, result.as_numpy("rewards")[:, 0].tolist(), strict=True):
                out[i] = v
        return out

    @staticmethod
    def _rows(sequences: Sequence[Sequence[int]], members: list[int], padded: int) -> tuple[np.ndarray, np.ndarray]:
        """Right-padded ids and true lengths of the `members` rows."""
        ids = np.zeros((len(members), padded), dtype=np.int64)
        for row, i in enumerate(members):
            ids[row, : len(sequences[i])] = sequences[i]
        lengths = np.array([[len(sequences[i])] for i in members], dtype=np.int64)
        return ids, lengths

    def _infer_async(self, client: Any, rows: tuple[np.ndarray, np.ndarray], timeout: float | None) -> Future[Any]:
        ids, lengths = rows
        inputs = [
            self._grpc.InferInput("input_ids", list(ids.shape), "INT64"),
            self._grpc.InferInput("lengths", list(lengths.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(lengths)
        future: Future[Any] = Future()
        generation = self._generation

        def done(result: Any, error: Any) -> None:
            if error is not None:
                failure = self._translate(error)
                if not isinstance(failure, DeadlineExceeded) and generation == self._generation:
                    self.failures += 1  # this server could not run the model (a deadline says nothing of it)
                future.set_exception(failure)
            else:
                self.failures = 0
                future.set_result(result)

        try:
            client.async_infer(
                self.model_name,
                inputs,
                done,
                client_timeout=timeout,
                outputs=[self._grpc.InferRequestedOutput("rewards")],
            )
        except Exception as e:  # a client closed by `reconnect` refuses new calls
            future.set_exception(BackendUnavailable(f"Triton at {self.url} is unreachable: {e}"))
        return future

    def _translate(self, error: Any) -> ScorerError:
        status = str(getattr(error, "status", lambda: "")() or "")
        text = str(error)
        if "DEADLINE_EXCEEDED" in status or "Deadline" in text:
            return DeadlineExceeded(f"Triton did not answer within the deadline: {text}")
        if any(code in status for code in ("UNAVAILABLE", "CANCELLED")) or "connect" in text.lower():
            return BackendUnavailable(f"Triton at {self.url} is unreachable: {text}")
        if "is not healthy" in text:  # the model's stub died: the call may be retried once Triton is restarted
            return BackendUnavailable(f"Triton's process for {self.model_name} died (being restarted): {text}")
        return ScorerError(f"Triton inference failed: {text}")

    def close(self) -> None:
        self.client.close()
