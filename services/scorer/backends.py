"""Inference backends: token sequences in, one reward per sequence out.

- `TorchBackend`: the model in this process, length-grouped batches (for places without Triton).
- `TritonBackend`: a Triton server over gRPC (`tritonclient`): ours started by PyTriton
  (`triton_model`), or any Triton serving the same model signature. Sequences are padded to
  64-token buckets so Triton's dynamic batcher can merge concurrent requests of similar length.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np

from services.scorer.batching import by_bucket, length_groups
from services.scorer.errors import BackendUnavailable, DeadlineExceeded, ScorerError

log = logging.getLogger(__name__)
MAX_BATCH_TOKENS = 32768


class Backend(Protocol):
    name: str

    def ready(self) -> bool: ...

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]: ...

    def close(self) -> None: ...


def score_in_groups(model: Any, sequences: Sequence[Sequence[int]], max_batch: int, device: str) -> list[float]:
    """Run `model` over length-grouped batches; results in input order."""
    import torch

    from trainer.model import rewards

    out = [0.0] * len(sequences)
    with torch.no_grad():
        for group in length_groups([len(s) for s in sequences], max_batch, MAX_BATCH_TOKENS):
            values = rewards(model, [sequences[i] for i in group], device).tolist()
            for i, v in zip(group, values, strict=True):
                out[i] = v
    return out


class TorchBackend:
    name = "torch"

    def __init__(self, model_dir: str, device: str = "cpu", max_batch: int = 64) -> None:
        from trainer.model import load_model

        self.model, _ = load_model(model_dir)
        self.model.to(device).eval()
        self.device, self.max_batch = device, max_batch
        self._lock = threading.Lock()  # one forward at a time; torch uses the cores itself

    def ready(self) -> bool:
        return True

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]:
        with self._lock:
            return score_in_groups(self.model, sequences, self.max_batch, self.device)

    def close(self) -> None:
        pass


class TritonBackend:
    name = "triton"

    def __init__(self, url: str, model_name: str) -> None:
        import tritonclient.grpc as triton_grpc

        self._grpc = triton_grpc
        self.url, self.model_name = url, model_name
        self.client = triton_grpc.InferenceServerClient(url=url)

    def ready(self) -> bool:
        try:
            return bool(self.client.is_model_ready(self.model_name))
        except Exception:
            return False

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]:
        """One Triton request per length bucket, in flight together."""
        pending: list[tuple[list[int], Future[Any]]] = []
        for padded, members in by_bucket([len(s) for s in sequences]).items():
            ids = np.zeros((len(members), padded), dtype=np.int64)
            for row, i in enumerate(members):
                ids[row, : len(sequences[i])] = sequences[i]
            lengths = np.array([[len(sequences[i])] for i in members], dtype=np.int64)
            pending.append((members, self._infer_async(ids, lengths, timeout)))
        out = [0.0] * len(sequences)
        for members, future in pending:
            result = future.result()
            for i, v in zip(members, result.as_numpy("rewards")[:, 0].tolist(), strict=True):
                out[i] = v
        return out

    def _infer_async(self, ids: np.ndarray, lengths: np.ndarray, timeout: float | None) -> Future[Any]:
        inputs = [
            self._grpc.InferInput("input_ids", list(ids.shape), "INT64"),
            self._grpc.InferInput("lengths", list(lengths.shape), "INT64"),
        ]
        inputs[0].set_data_from_numpy(ids)
        inputs[1].set_data_from_numpy(lengths)
        future: Future[Any] = Future()

        def done(result: Any, error: Any) -> None:
            if error is not None:
                future.set_exception(self._translate(error))
            else:
                future.set_result(result)

        self.client.async_infer(
            self.model_name,
            inputs,
            done,
            client_timeout=timeout,
            outputs=[self._grpc.InferRequestedOutput("rewards")],
        )
        return future

    def _translate(self, error: Any) -> ScorerError:
        status = str(getattr(error, "status", lambda: "")() or "")
        text = str(error)
        if "DEADLINE_EXCEEDED" in status or "Deadline" in text:
            return DeadlineExceeded(f"Triton did not answer within the deadline: {text}")
        if "UNAVAILABLE" in status or "unavailable" in text.lower() or "connect" in text.lower():
            return BackendUnavailable(f"Triton at {self.url} is unreachable: {text}")
        return ScorerError(f"Triton inference failed: {text}")

    def close(self) -> None:
        self.client.close()
