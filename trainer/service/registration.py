"""Where a model registered over gRPC may come from: folders the training service owns or was told to trust.

    registrable("/data/cheems/trainings/t-1/final", roots)      # its resolved path, when under a root
    registrable("/home/alice/my-model", roots)                  # BadRegistration naming `path` and the roots

An operator may register a model (RegisterModel); the scorer and the evaluator then load it, and a training may
start from it (`base_model`). So the path is confined, like Export's name and a request's eval files: after
symlinks are resolved it must lie under one of the service's roots: its data directory (trainings' outputs),
its base model's directory, and the folders given as `TrainingConfig.model_roots` (a shared models volume).
Whoever runs `cheems models register` against the store directly holds the database's credentials, an admin's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cheems.errors import InvalidInput


class BadRegistration(InvalidInput):
    """A RegisterModel path outside every folder registrations may come from."""


def registration_roots(data_dir: Path, base_model: str, extra: Sequence[str]) -> tuple[Path, ...]:
    """The folders a registered model may lie under (resolved): the data directory, the base model's directory
    (when it is one here, not a Hub id) and `extra`."""
    roots = [data_dir, *(Path(p) for p in extra)]
    if base_model and Path(base_model).is_dir():
        roots.append(Path(base_model))
    return tuple(dict.fromkeys(r.resolve() for r in roots))


def registrable(path: str, roots: Sequence[Path]) -> str:
    """`path` resolved, when it lies under one of `roots`; BadRegistration else (a NUL or an empty path too)."""
    if not path or "\0" in path:
        raise BadRegistration("path: required: the directory of a checkpoint under the service's model folders")
    resolved = Path(path).resolve()
    if any(resolved.is_relative_to(root) for root in roots):
        return str(resolved)
    raise BadRegistration(
        f"path: {path} is outside the folders models are registered from ({', '.join(map(str, roots))}); "
        "put the checkpoint there, or have the service started with --model-root for its folder"
    )
