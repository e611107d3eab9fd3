"""The vLLM backend for one model, as `cheems serve --backend vllm` configures it.

    backend, engine = vllm_backend(config, "out/models/rm")   # engine: None with --vllm-url

Without --vllm-url each model gets an engine of its own (vLLM serves one model a process), with an API key of its
own that the scorer draws (`engine`): `--follow` starts the promoted model's engine beside the one serving,
switches calls to it once it is ready, and stops the old engine when its last call is done (docs/serving.md:
the vLLM backend). An engine at --vllm-url gets the key in --vllm-api-key-file (a file: a key on a command line
is read by every local user); the scorer asks it for its models at start, and a key it refuses stops the start
with one line.
"""

from __future__ import annotations

import http.client
import json
from typing import Any

from cheems.credentials import read_secret
from cheems.errors import ConfigError
from cheems.precision import dtype_name, resolve_dtype
from services.observe import tracing
from services.scorer.config import ScorerConfig
from services.scorer.errors import BackendUnavailable
from services.scorer.vllm.available import vllm_python
from services.scorer.vllm.client import VllmBackend, host_port
from services.scorer.vllm.engine import EngineOptions, VllmEngine, authorization, connection_to


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
        key = read_secret(config.vllm_api_key_file, "--vllm-api-key-file") if config.vllm_api_key_file else ""
        try:  # asked even when the name is given: a key the server refuses stops the start here, in one line
            names = served_models(url, key)
        except BackendUnavailable:
            if not config.vllm_model_name:
                raise
            names = []  # not up yet: readiness follows it
        return VllmBackend(url, config.vllm_model_name or names[0], api_key=key), None
    engine = VllmEngine(path, config.triton_model_name, options_of(config))
    url = engine.start()  # stops what it started before raising
    backend = VllmBackend(url, engine.name, engine.prefix_sharing, engine.dtype, api_key=engine.api_key)
    engine.on_restart = backend.reconnect
    return backend, engine


def served_models(url: str, key: str = "") -> list[str]:
    """The model names the vLLM server at host:port serves (its /v1/models, which vLLM's own key check guards);
    ConfigError when it refuses the key, UNAVAILABLE when it cannot say."""
    connection = connection_to(url, timeout=10)
    try:
        connection.request("GET", "/v1/models", headers=authorization(key))
        response = connection.getresponse()
        status, body = response.status, response.read()
    except (OSError, http.client.HTTPException) as e:
        raise BackendUnavailable(f"the vLLM server at {url} did not list its models: {type(e).__name__}: {e}") from None
    finally:
        connection.close()
    if status in (401, 403):
        given = "the key in --vllm-api-key-file" if key else "to answer without an API key (give --vllm-api-key-file)"
        raise ConfigError(f"the vLLM server at {url} refused {given}: HTTP {status}")
    try:
        reply: Any = json.loads(body)
        names = [str(model["id"]) for model in reply["data"]]
    except (ValueError, KeyError, TypeError) as e:
        raise BackendUnavailable(f"the vLLM server at {url} did not list its models: {type(e).__name__}: {e}") from None
    if not names:
        raise BackendUnavailable(f"the vLLM server at {url} serves no model")
    return names
