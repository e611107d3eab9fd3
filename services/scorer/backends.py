"""Inference backends: token sequences in, one reward per sequence out.

- `TorchBackend`: the model in this process, length-grouped batches (for places without Triton).
- `TritonBackend`: a Triton server over gRPC (`tritonclient`): ours started by PyTriton
  (`triton.model`), or any Triton serving the same model signature. Sequences are padded up to
  a multiple of `batching.BUCKET` (512) tokens, so Triton's dynamic batcher can merge concurrent
  requests whose lengths fall in the same 512-token bucket, and sent in requests of at most
  Triton's `max_batch_size` rows (Triton rejects larger ones). With prefix sharing, sequences the
  model would pack into one row (one prompt's responses) travel in one request (`batching.requests`).

`prefix_sharing` says whether the model packs sequences that share a prefix (`cheems.packing`);
GetModelInfo reports it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np

from cheems.forward import can_share, score_in_groups
from cheems.packing import Cost, plan_rows
from services.scorer.batching import requests
from services.scorer.errors import BackendUnavailable, DeadlineExceeded, ScorerError

log = logging.getLogger(__name__)


class Backend(Protocol):
    name: str

    @property
    def prefix_sharing(self) -> bool: ...

    def ready(self) -> bool: ...

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]: ...

    def close(self) -> None: ...


class TorchBackend:
    name = "torch"

    def __init__(
        self, model_dir: str, device: str = "cpu", max_batch: int = 64, tokenizer: Any = None, share: bool = False
    ) -> None:
        """`tokenizer`: the checkpoint's, if loaded already (else `load_model` loads it again); `share`: pack
        sequences with a common prefix (where the model's attention takes the packed mask)."""
        from cheems.model import load_model

        self.model, _ = load_model(model_dir, tokenizer=tokenizer)
        self.model.to(device).eval()
        self.device, self.max_batch = device, max_batch
        self.prefix_sharing = share and can_share(self.model)
        self._lock = threading.Lock()  # one forward at a time; torch uses the cores itself

    def ready(self) -> bool:
        return True

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]:
        with self._lock:
            if self.model is None:
                raise BackendUnavailable("the model was closed (the scorer is stopping or switched models)")
            return score_in_groups(self.model, sequences, self.max_batch, self.device, share=self.prefix_sharing)

    def close(self) -> None:
        with self._lock:  # after the forward in progress, if any
            self.model = None  # the memory goes now, not when the last reference to this backend does


class TritonBackend:
    name = "triton"

    def __init__(
        self,
        url: str,
        model_name: str,
        max_batch_size: int = 64,
        cost: Cost | None = None,
        prefix_sharing: bool | None = None,
    ) -> None:
        """`cost`: the model's (`Cost.of`), to keep the sequences it would pack in one request; None sends each
        to its length's bucket. `prefix_sharing`: whether the Triton model packs; None asks Triton (the
        `prefix_sharing` parameter of its model config, which `triton.repository` writes)."""
        import tritonclient.grpc as triton_grpc

        self._grpc = triton_grpc
        self.model_name, self.max_batch_size = model_name, max_batch_size
        self.url = url
        self.client = triton_grpc.InferenceServerClient(url=url)
        self.cost = cost
        self._prefix_sharing = prefix_sharing

    @property
    def prefix_sharing(self) -> bool:
        """Whether the Triton model packs sequences that share a prefix; False while Triton cannot be asked."""
        if self._prefix_sharing is None:
            try:
                config = self.client.get_model_config(self.model_name, as_json=True, client_timeout=5)["config"]
            except Exception:
                return False
            value = config.get("parameters", {}).get("prefix_sharing", {}).get("string_value", "off")
            self._prefix_sharing = value == "on"
        return self._prefix_sharing

    def reconnect(self, url: str) -> None:
        """Point at a restarted Triton; calls in flight on the old one fail as UNAVAILABLE."""
        old, self.url = self.client, url
        self.client = self._grpc.InferenceServerClient(url=url)
        old.close()

    def ready(self) -> bool:
        try:
            return bool(self.client.is_model_ready(self.model_name))
        except Exception:
            return False

    def score(self, sequences: Sequence[Sequence[int]], timeout: float | None = None) -> list[float]:
        """One Triton request per length bucket (`batching.BUCKET` tokens) and chunk of max_batch_size rows;
        with a `cost`, the sequences the model would pack together go in one request.

        All are in flight together. `timeout` None waits as long as Triton takes (the deadline is the scorer's)."""
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

        def done(result: Any, error: Any) -> None:
            if error is not None:
                future.set_exception(self._translate(error))
            else:
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
        return ScorerError(f"Triton inference failed: {text}")

    def close(self) -> None:
        self.client.close()
