"""Loading a checkpoint to serve, and choosing the first one: `--model`, or the registry's production model.

    model, why_not = load_first(config)                  # --model DIR or Hub id, or (--follow) the production model
    model = load_served(config, ref, previous=current)   # tokenizer + backend (its Triton or vLLM engine, or torch)

A model that cannot be loaded leaves nothing running (a Triton started for it is stopped) and raises.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Any

from cheems.attention import resolve_attention
from cheems.execution import Execution
from cheems.hub import resolve_model, served_name
from cheems.packing import Cost
from cheems.precision import resolve_dtype
from services.scorer.backends import Backend, TorchBackend, TritonBackend
from services.scorer.config import ScorerConfig
from services.scorer.errors import BackendUnavailable, UnknownModel
from services.scorer.models.served import ModelRef, ServedModel
from services.scorer.models.shelf import Lookup
from services.scorer.triton.host import TritonHost
from services.scorer.triton.shared import SharedTriton
from services.scorer.vllm.engine import VllmEngine
from services.scorer.vllm.serving import vllm_backend

log = logging.getLogger(__name__)
WEIGHTS = {".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt"}
NOT_TOKENIZER = {"cheems_metadata.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"}


def first_models(config: ScorerConfig, lookup: Lookup | None = None) -> list[ModelRef]:
    """What to serve first: `--model` (its id `--model-id`, else its directory's or Hub repository's name);
    without it, the registry's production model (through `lookup`, else one made for `config.db`). Empty when
    there is none yet (calls must then name their model)."""
    if config.model:  # a Hugging Face Hub id: its snapshot in the cache, reported by the repository's name
        return [ModelRef(config.model_id or served_name(config.model), str(resolve_model(config.model)))]
    try:
        return [(lookup or registry_lookup(config.db))("production")[0]]
    except UnknownModel:
        return []


def registry_lookup(url: str) -> Lookup:
    """name -> (ModelRef, aliases) from the store's lifecycle: an id or an alias ("production"); UnknownModel
    naming why when the registry has no such model or no longer serves it (rejected, retired)."""
    from sqlalchemy.exc import SQLAlchemyError

    from services.store import lifecycle
    from services.store.db import StoreConfig, create_engine_for, read_scope
    from services.store.errors import InvalidRecord
    from services.store.errors import UnknownModel as NotRegistered

    engine = create_engine_for(StoreConfig(url))

    def lookup(name: str) -> tuple[ModelRef, list[str]]:
        try:
            with read_scope(engine) as session:  # never behind a writer: a call naming a model waits on it
                model = lifecycle.resolve(session, name)
                why = lifecycle.unservable_reason(model)
                aliases = lifecycle.aliases(session).get(model.id, [])
        except (NotRegistered, InvalidRecord) as e:  # no such model, or an id no model could have
            raise UnknownModel(str(e)) from None
        except SQLAlchemyError as e:
            raise BackendUnavailable(f"the model registry is unreachable: {str(e).splitlines()[0]}") from None
        if why:
            raise UnknownModel(f"{why}: it is no longer served")
        return ModelRef(model.id, model.path, model.created_at), aliases

    return lookup


def load_first(
    config: ScorerConfig,
    backend: Backend | None = None,
    lookup: Lookup | None = None,
    triton: SharedTriton | None = None,
) -> tuple[ServedModel | None, str]:
    """(the first model, loaded; why it could not be, when it could not). `--model` that fails raises: it
    names the one model to serve. A production model that fails leaves the scorer without a default model
    (calls naming theirs are still served) and says why."""
    refs = first_models(config, lookup)
    if not refs:
        return None, ""
    try:
        return load_served(config, refs[0], backend, triton=triton), ""
    except Exception as e:
        if config.model:
            raise
        log.error("%s; serving no default model until another is production", load_error(refs[0], e))
        return None, public_load_error(refs[0], e)


def load_error(ref: ModelRef, error: BaseException) -> str:
    """Why `ref` could not be loaded, for the scorer's log (its path and the whole message)."""
    return f"model {ref.model_id} ({ref.path}) could not be loaded: {error}"


def public_load_error(ref: ModelRef, error: BaseException) -> str:
    """Why, for callers (GetModelInfo.follow_error): the model's id and the kind of error, never a server path."""
    return f"model {ref.model_id} could not be loaded ({type(error).__name__}): the scorer's log says why"


def load_served(
    config: ScorerConfig,
    ref: ModelRef,
    backend: Backend | None = None,
    previous: ServedModel | None = None,
    triton: SharedTriton | None = None,
) -> ServedModel:
    """The model of `ref`, ready to serve; `backend` replaces the one `config.backend` names (benchmarks);
    `triton`: the Triton the scorer's models share (None: a Triton of the model's own, where one is needed).

    The tokenizers of `previous` are shared when its tokenizer files are the same (models trained from one
    base): loading and copying a tokenizer costs seconds of held GIL, which calls in flight would feel."""
    from transformers import AutoTokenizer

    started = time.perf_counter()
    fingerprint = tokenizer_fingerprint(ref.path)
    shared = previous if previous is not None and previous.fingerprint == fingerprint else None
    tokenizer = shared.tokenizer if shared else AutoTokenizer.from_pretrained(ref.path)
    host: TritonHost | VllmEngine | None = None
    try:
        if backend is None:
            backend, host = make_backend(config, ref.path, tokenizer, triton)
        model = ServedModel(ref, backend, tokenizer, config.max_length, host, fingerprint, shared)
        model.load_seconds = time.perf_counter() - started
        return model
    except BaseException:
        if host is not None:
            host.stop()
        raise


def tokenizer_fingerprint(path: str) -> str:
    """A hash of the checkpoint's files but its weights and its training record: equal hashes, same tokenizer."""
    digest = hashlib.sha256()
    folder = Path(path)
    if not folder.is_dir():
        return ""  # loading will say what is wrong
    for file in sorted(folder.iterdir()):
        if file.is_file() and file.suffix not in WEIGHTS and file.name not in NOT_TOKENIZER:
            digest.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def make_backend(
    config: ScorerConfig, path: str, tokenizer: Any = None, triton: SharedTriton | None = None
) -> tuple[Backend, TritonHost | VllmEngine | None]:
    """(backend, its handle in the Triton or the vLLM engine that serves it, or None); `tokenizer`, the
    checkpoint's, saves loading it again; `triton`, the Triton shared by the scorer's models (None: one of the
    model's own).

    `prefix_sharing` and `dtype` reach the model's forward: in process, in the infer function of our Triton; an
    external Triton's model has its own (`cheems export-triton --prefix-sharing --dtype`), and the scorer only
    keeps one prompt's sequences in one request for it."""
    share = config.prefix_sharing
    if config.backend == "vllm":
        return vllm_backend(config, path)
    if config.backend == "torch":
        return TorchBackend(path, execution_of(config), tokenizer, config.queue_delay_us / 1e6), None
    if config.triton_url:
        from transformers import AutoConfig

        cost = Cost.of(AutoConfig.from_pretrained(path)) if share else None
        return TritonBackend(config.triton_url, config.triton_model_name, config.max_batch_size, cost), None
    host = TritonHost(path, config.triton_model_name, execution_of(config), tokenizer, triton, config.queue_delay_us)
    try:
        url = host.start()
        cost = Cost.of(host.model_config, device=config.device) if host.prefix_sharing else None
        backend = TritonBackend(url, host.name, config.max_batch_size, cost, host.prefix_sharing, host.dtype)
        host.on_restart = backend.reconnect
        return backend, host
    except BaseException:
        host.stop()
        raise


def execution_of(config: ScorerConfig) -> Execution:
    """How the scorer runs its models; the dtype and the attention are resolved here, so one the device cannot run
    is refused (ConfigError) before anything loads."""
    dtype = resolve_dtype(config.dtype, config.device)
    attention = resolve_attention(config.attn_implementation, config.device)
    return Execution(
        config.device, dtype, config.prefix_sharing, config.max_batch_size, config.max_batch_tokens, attention
    )
