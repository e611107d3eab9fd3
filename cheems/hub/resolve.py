"""A model string -> a checkpoint directory: the directory itself, or the Hub repository's cached snapshot.

huggingface_hub does the work (`snapshot_download`): its cache layout (HF_HOME, HF_HUB_CACHE), its offline
mode (HF_HUB_OFFLINE: the cache only), its credentials (HF_TOKEN), its endpoint (HF_ENDPOINT), its locks (two
processes fetching one file wait for each other) and its progress bars. Only what loading reads is fetched:
safetensors weights, the config, tokenizer files and the chat template; never pickles (*.bin, *.pt). A
repository without safetensors is refused, as a local directory without them is (`cheems.model.load_model`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cheems.errors import (
    CheemsError,
    ModelError,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from cheems.hub.names import HubModel, model_source

log = logging.getLogger(__name__)

WEIGHTS = ["*.safetensors", "*.safetensors.index.json"]
# config, tokenizer (BPE, WordPiece, SentencePiece, tiktoken files), chat template, our own training record
SUPPORT = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "tokenizer.model",
    "*.tiktoken",
    "chat_template.jinja",
    "chat_template.json",
    "additional_chat_templates/*.jinja",
    "cheems_metadata.json",
]
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def resolve_model(name: str | Path, *, revision: str | None = None, weights: bool = True) -> Path:
    """The checkpoint directory `name` stands for: a local directory as it is, else the snapshot of the Hub
    repository `org/name[@revision]` in huggingface_hub's cache, downloaded first when it is not there (and
    HF_HUB_OFFLINE is not set). `weights=False` fetches the config and tokenizer only (plans, tokenization).

    Raises ModelError (a path that is no directory, an invalid id, no safetensors), NotFound (no such
    repository or revision; not cached while offline), PermissionDenied (gated), Unauthenticated (HF_TOKEN
    refused), Unavailable (the Hub cannot be reached and the model is not cached)."""
    source = model_source(name, revision)
    if isinstance(source, Path):
        return source
    folder = snapshot(source, WEIGHTS + SUPPORT if weights else SUPPORT)
    if weights:
        check_weights(source, folder)
    log.info("model %s: %s", source, folder)
    return folder


def served_name(name: str | Path) -> str:
    """The name a model is reported by when none is given: a directory's name, a Hub repository's name."""
    try:
        source = model_source(name)
    except ModelError:  # not a model at all: loading it will say why
        source = Path(str(name))
    return source.repo_id.rpartition("/")[2] if isinstance(source, HubModel) else (source.name or str(source))


def snapshot(model: HubModel, patterns: list[str]) -> Path:
    from huggingface_hub import constants, snapshot_download

    offline = constants.is_offline_mode()
    try:
        with download_progress():
            folder = snapshot_download(
                model.repo_id, revision=model.revision, allow_patterns=patterns, local_files_only=offline
            )
    except Exception as e:
        refused = refusal(model, e, offline)
        if refused is None:
            raise
        raise refused from e
    return Path(folder)


@contextmanager
def download_progress() -> Iterator[None]:
    """huggingface_hub's progress bars on for the download (`cheems.model.quiet_transformers` turns them off
    for loading), unless HF_HUB_DISABLE_PROGRESS_BARS says otherwise; as they were afterwards."""
    from huggingface_hub import constants
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    switch = constants.HF_HUB_DISABLE_PROGRESS_BARS is None and are_progress_bars_disabled()
    if switch:
        enable_progress_bars()
    try:
        yield
    finally:
        if switch:
            disable_progress_bars()


def check_weights(model: HubModel, folder: Path) -> None:
    """Refuse a snapshot without safetensors weights: pickles are never loaded, nor fetched."""
    if any(folder.glob("*.safetensors")):
        return
    pickled = sorted(p.name for pattern in PICKLES for p in folder.glob(pattern))
    if pickled:
        raise ModelError(
            f"{model}: only pickled weights ({', '.join(pickled[:3])}), which are refused: safetensors only"
        )
    from huggingface_hub import constants

    if constants.is_offline_mode():
        raise ModelError(
            f"{model}: no *.safetensors weights in its cached snapshot ({folder}): fetch them first with "
            "HF_HUB_OFFLINE unset (pickled .bin checkpoints are refused)"
        )
    raise ModelError(f"{model}: the repository has no *.safetensors weights (pickled .bin checkpoints are refused)")


def refusal(model: HubModel, error: Exception, offline: bool) -> CheemsError | None:
    """The project's error for one of huggingface_hub's, in one line naming the model; None: not ours to map."""
    from huggingface_hub import constants
    from huggingface_hub import errors as hub

    cache = constants.HF_HUB_CACHE
    if isinstance(error, hub.GatedRepoError):
        return PermissionDenied(
            f"{model} is gated on the Hugging Face Hub: accept its conditions on its page, then set HF_TOKEN "
            "to the token of an account granted access"
        )
    if isinstance(error, hub.RepositoryNotFoundError):
        return NotFound(
            f"{model}: no such model on the Hugging Face Hub, or a private one (set HF_TOKEN to a token with access)"
        )
    if isinstance(error, hub.RevisionNotFoundError):
        return NotFound(
            f"{model}: the Hugging Face Hub has no revision {model.revision or 'main'!r} of {model.repo_id}"
        )
    if isinstance(error, getattr(hub, "IncompleteSnapshotError", ())):  # huggingface_hub 2.x tells it apart
        return NotFound(
            f"{model}: only part of it is in the Hugging Face cache ({cache}): download it again with "
            "HF_HUB_OFFLINE unset"
        )
    if isinstance(error, hub.LocalEntryNotFoundError):
        if offline:
            return NotFound(
                f"{model} is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is set: download it first "
                f"(once without HF_HUB_OFFLINE, or `hf download {model.repo_id}`) or unset HF_HUB_OFFLINE"
            )
        return Unavailable(
            f"{model}: the Hugging Face Hub ({constants.ENDPOINT}) cannot be reached and the model is not in the "
            f"cache ({cache}): check the network and HF_ENDPOINT, or download it first"
        )
    if isinstance(error, hub.HfHubHTTPError):
        return http_refusal(model, error)
    if isinstance(error, hub.HFValidationError):
        return ModelError(f"{model}: {first_line(error)}")
    return None


def http_refusal(model: HubModel, error: Exception) -> CheemsError:
    status = getattr(getattr(error, "response", None), "status_code", 0)
    if status == 401:
        return Unauthenticated(f"{model}: the Hugging Face Hub refused the credential: check HF_TOKEN")
    if status == 403:
        return PermissionDenied(
            f"{model}: the Hugging Face Hub forbids it to this account (HF_TOKEN): {first_line(error)}"
        )
    if status >= 500 or not status:
        return Unavailable(f"{model}: the Hugging Face Hub failed ({first_line(error)}); try again later")
    return ModelError(f"{model}: {first_line(error)}")


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
