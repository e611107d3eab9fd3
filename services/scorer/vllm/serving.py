"""The vLLM backend for one model, as `cheems serve --backend vllm` configures it.

    backend, engine = vllm_backend(config, "out/models/rm")   # engine: None with --vllm-url

Without --vllm-url each model gets an engine of its own (vLLM serves one model a process): `--follow`
starts the promoted model's engine beside the one serving, switches calls to it once it is ready, and
stops the old engine when its last call is done (README: the vLLM backend).
"""

from __future__ import annotations

import http.client
import json
from typing import Any

from cheems.precision import dtype_name, resolve_dtype
from services.observe import tracing
from services.scorer.config import ScorerConfig
from services.scorer.errors import BackendUnavailable
from services.scorer.vllm.available import vllm_python
from services.scorer.vllm.client import VllmBackend, host_port
from services.scorer.vllm.engine import EngineOptions, VllmEngine, connection_to


def options_of(config: ScorerConfig) -> EngineOptions:
    """The engine's options from the scorer's: dtype resolved for --device as the torch backend does, the
    prefix cache following --prefix-sharing, --max-batch-size and --max-batch-tokens its scheduler's limits."""
    on_gpu = config.device.startswith("cuda")
    return EngineOptions(
        python=vllm_python(config.vllm_python),
        device="cuda" if on_gpu else "cpu",
        tensor_parallel_size=config.tensor_parallel_size,
        dtype=dtype_name(resolve_dtype(config.dtype, config.device)),
        max_model_len=config.max_model_len or config.max_length,
        prefix_caching=config.prefix_sharing,
        memory_fraction=config.vllm_memory_fraction or (0.9 if on_gpu else 0.5),
        max_num_seqs=config.max_batch_size,
        max_num_batched_tokens=config.max_batch_tokens,
        quick_start=config.vllm_quick_start,
        start_seconds=config.vllm_start_seconds,
        otlp_traces_endpoint=tracing.traces_endpoint() if tracing.enabled() else "",
    )


def vllm_backend(config: ScorerConfig, path: str) -> tuple[VllmBackend, VllmEngine | None]:
    """(backend, the engine this scorer started for it, or None for --vllm-url). An engine that fails to start
    leaves no process behind and raises."""
    if config.vllm_url:
        url = host_port(config.vllm_url)
        return VllmBackend(url, config.vllm_model_name or served_models(url)[0]), None
    engine = VllmEngine(path, config.triton_model_name, options_of(config))
    url = engine.start()  # stops what it started before raising
    backend = VllmBackend(url, engine.name, engine.prefix_sharing, engine.dtype)
    engine.on_restart = backend.reconnect
    return backend, engine


def served_models(url: str) -> list[str]:
    """The model names the vLLM server at host:port serves (its /v1/models); UNAVAILABLE when it cannot say."""
    connection = connection_to(url, timeout=10)
    try:
        connection.request("GET", "/v1/models")
        reply: Any = json.loads(connection.getresponse().read())
        names = [str(model["id"]) for model in reply["data"]]
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as e:
        raise BackendUnavailable(f"the vLLM server at {url} did not list its models: {type(e).__name__}: {e}") from None
    finally:
        connection.close()
    if not names:
        raise BackendUnavailable(f"the vLLM server at {url} serves no model")
    return names
