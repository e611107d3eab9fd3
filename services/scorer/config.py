"""The scorer's one configuration object: every limit, default and knob of `cheems serve`."""

from __future__ import annotations

from dataclasses import dataclass

from cheems.chat import Truncation

BACKENDS = ("triton", "torch")


@dataclass
class ScorerConfig:
    model: str = ""  # checkpoint directory (AutoModelForSequenceClassification, safetensors)
    backend: str = "triton"  # triton (PyTriton-started, or external via triton_url) | torch (in-process)
    host: str = "127.0.0.1"  # this machine only; a pod passes --host 0.0.0.0 (the NetworkPolicy guards it)
    grpc_port: int = 50051  # 0 = pick a free port
    http_port: int = 8000  # 0 = pick a free port; -1 = no HTTP server
    triton_url: str = ""  # host:port of an external Triton gRPC endpoint; empty = start one with PyTriton
    triton_model_name: str = "cheems_rm"
    max_batch_size: int = 64  # Triton's max batch: a request is sent to Triton in chunks of at most this many
    queue_delay_us: int = 2000  # how long Triton waits to fill a batch
    max_responses: int = 64  # per Score call (per item of ScoreBatch)
    max_batch_items: int = 128  # items per ScoreBatch call
    max_queries: int = 4096  # queries per HTTP /get_reward call (OpenRLHF rollout batches)
    max_length: int = 2048  # tokens per (prompt, response)
    truncation: str = "error"  # error | left | right: what to do with an over-length response
    max_message_bytes: int = 64 * 1024 * 1024  # largest request, gRPC message and HTTP body alike
    max_call_seconds: float = 300.0  # a call with no deadline (or a longer one) is cut off after this
    auth_token: str = ""  # when set, calls need `authorization: Bearer <token>` (HTTP also takes ?token=)
    tls_cert: str = ""  # PEM files; both set = TLS on the gRPC port
    tls_key: str = ""
    drain_seconds: float = 10.0  # grace period for in-flight calls on SIGTERM
    triton_restarts: int = 3  # attempts to restart a crashed PyTriton-started Triton before liveness fails
    watch_seconds: float = 0.5  # how often the backend's health is checked
    device: str = "cpu"
    workers: int = 16  # gRPC handler threads

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.truncation not in {"error", Truncation.LEFT.value, Truncation.RIGHT.value}:
            raise ValueError(f"truncation must be error, left or right, got {self.truncation!r}")
        for name in ("max_batch_size", "max_responses", "max_batch_items", "max_queries", "max_length", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_call_seconds", "watch_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if self.triton_restarts < 0:
            raise ValueError(f"triton_restarts must be >= 0, got {self.triton_restarts}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key must be given together")

    @property
    def truncation_policy(self) -> Truncation:
        return Truncation.NONE if self.truncation == "error" else Truncation(self.truncation)
