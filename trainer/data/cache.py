"""The token cache: training files tokenized once into arrays that every rank and every later run memory-maps.

    <root>/<key>/ids.u32      every kept response's token ids end to end (uint32, memory-mapped)
    <root>/<key>/layout.npz   offsets, groups and pairs (int64 arrays)
    <root>/<key>/meta.json    the length statistics and what the key was made of

The key is a sha256 over what changes the result: each file's content digest (and the forced layout), the
tokenizer (its serialized form, chat template and special tokens), `max_length`, the length policy and whether
unpaired responses are kept. The first process of a node to take `<key>.lock` builds the entry (the file read,
then encoded a chunk at a time by the tokenizer's batch encoding, with a progress bar); the others wait on the
lock and map what it built. An entry appears whole: it is written under a temporary name and renamed.

    data = cached_dataset(Path("~/.cache/cheems/tokens"), spec, tokenizer, read=lambda: read_groups(path))
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.groups import LengthPolicy, PromptGroup
from trainer.data.tokens import TOKEN_DTYPE, Dataset, LengthStats, dataset_of, encode_groups

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the entry's files or their meaning change
IDS, LAYOUT, META = "ids.u32", "layout.npz", "meta.json"


@dataclass(frozen=True)
class CacheSpec:
    """What a training run's tokens depend on, besides the tokenizer."""

    files: tuple[str, ...]
    layout: str | None
    max_length: int
    policy: LengthPolicy
    keep_unpaired: bool = False


def default_root() -> Path:
    """CHEEMS_CACHE_DIR/tokens, else $XDG_CACHE_HOME/cheems/tokens, else ~/.cache/cheems/tokens."""
    from cheems.settings import Settings

    base = Settings().cache_dir or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "cheems")
    return Path(base).expanduser() / "tokens"


def files_digest(paths: Sequence[str | Path]) -> str:
    """sha256 of the files' bytes one after another, read 4 MiB at a time (a 372 MB file is never held)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()


def tokenizer_digest(tokenizer: Any) -> str:
    """A digest of everything of a tokenizer that decides the ids a conversation gets."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    vocabulary = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    digest.update(vocabulary.encode())
    digest.update(json.dumps(tokenizer.chat_template, sort_keys=True).encode())
    digest.update(json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def cache_key(spec: CacheSpec, tokenizer: Any) -> str:
    parts = {
        "format": FORMAT,
        "files": [files_digest([path]) for path in spec.files],
        "layout": spec.layout,
        "tokenizer": tokenizer_digest(tokenizer),
        "max_length": spec.max_length,
        "policy": str(spec.policy),
        "keep_unpaired": spec.keep_unpaired,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def cached_dataset(
    root: Path,
    spec: CacheSpec,
    tokenizer: Any,
    read: Callable[[], Sequence[PromptGroup]],
    progress: bool = False,
) -> Dataset:
    """The dataset of `spec`, built into the cache by the first process that asks, memory-mapped by every one."""
    key = cache_key(spec, tokenizer)
    entry = root / key
    if not (entry / META).exists():
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root / f"{key}.lock"):
            if not (entry / META).exists():  # another process may have built it while this one waited
                build(entry, read(), tokenizer, spec, progress)
    return open_entry(entry)


def build(entry: Path, groups: Sequence[PromptGroup], tokenizer: Any, spec: CacheSpec, progress: bool) -> None:
    started = time.perf_counter()
    log.info("tokenizing %d prompts into the token cache %s", len(groups), entry)
    temporary = entry.with_name(f".{entry.name}.{socket.gethostname()}.{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    try:
        with (temporary / IDS).open("wb") as f:
            layout = encode_groups(
                groups, tokenizer, spec.max_length, spec.policy, spec.keep_unpaired, lambda ids: ids.tofile(f), progress
            )
        np.savez(temporary / LAYOUT, **layout.arrays())
        seconds = time.perf_counter() - started
        tokens = layout.offsets[-1]
        meta = {"stats": asdict(layout.stats), "tokens": tokens, "seconds": round(seconds, 1), "spec": _plain(spec)}
        (temporary / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        _publish(temporary, entry)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    log.info("token cache %s: %d responses, %d tokens, in %.1f s", entry.name, len(layout.group), tokens, seconds)


def open_entry(entry: Path) -> Dataset:
    """Map a complete entry: the ids stay on disk (the page cache shares them between the node's ranks)."""
    meta = json.loads((entry / META).read_text(encoding="utf-8"))
    size = (entry / IDS).stat().st_size
    ids = np.memmap(entry / IDS, dtype=TOKEN_DTYPE, mode="r") if size else np.zeros(0, dtype=TOKEN_DTYPE)
    with np.load(entry / LAYOUT) as arrays:
        data = dataset_of(ids, dict(arrays), LengthStats(**meta["stats"]))
    log.info("token cache %s: %d responses, %d tokens mapped", entry.name, len(data.examples), meta["tokens"])
    return data


def _publish(temporary: Path, entry: Path) -> None:
    """Rename the finished build into place. On shared storage whose locks do not reach other nodes, another
    node may have published the same entry first: its equal copy stays, this one goes."""
    try:
        os.replace(temporary, entry)
    except OSError:
        if not (entry / META).exists():
            raise
        shutil.rmtree(temporary, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _plain(spec: CacheSpec) -> dict[str, Any]:
    return {**asdict(spec), "policy": str(spec.policy), "files": [str(Path(p).resolve()) for p in spec.files]}
