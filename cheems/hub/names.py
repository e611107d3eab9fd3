"""What a model string names: a local checkpoint directory, or a Hugging Face Hub repository (pure logic).

    model_source("out/train/model")              -> Path("out/train/model")   (an existing directory)
    model_source("Qwen/Qwen2.5-0.5B")            -> HubModel("Qwen/Qwen2.5-0.5B")
    model_source("Qwen/Qwen2.5-0.5B@v1")         -> HubModel("Qwen/Qwen2.5-0.5B", "v1")   (branch, tag or commit)
    model_source("out/typo"), model_source("/x") -> ModelError: not a directory

A string that looks like a path (starts with / . or ~, has more than the one slash of org/name, or names
something that exists) and is not a directory keeps the plain "not a directory" error; only `org/name` goes
to the Hub (a bare name like `tiny` is far likelier a mistyped directory than a Hub model without an org).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cheems.errors import ModelError

HUB_FORM = "a Hugging Face Hub id (org/name, or org/name@revision)"


@dataclass(frozen=True)
class HubModel:
    """A repository on the Hub and the revision wanted (None: the default branch)."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id


def model_source(name: str | Path, revision: str | None = None) -> Path | HubModel:
    """The directory `name` is, or the Hub repository it names; `revision` as `@revision` would (not both)."""
    text = str(name).strip()
    if not text:
        raise ModelError(f"no model given: a checkpoint directory or {HUB_FORM}")
    path = Path(text).expanduser()
    if path.is_dir():
        if revision:
            raise ModelError(f"{text}: a local directory has no revision (got {revision!r})")
        return path
    repo, at, pinned = text.partition("@")
    if looks_like_path(text, repo) or path.exists():
        raise ModelError(f"{text!r} is not a directory")
    if repo.count("/") != 1:
        raise ModelError(f"{text!r} is neither a directory nor {HUB_FORM}")
    if at and not pinned:
        raise ModelError(f"{text!r}: an empty revision after '@'")
    if pinned and revision and pinned != revision:
        raise ModelError(f"{text!r}: two revisions given ({pinned!r} in the name, {revision!r} as the option)")
    check_repo_id(text, repo)
    return HubModel(repo, pinned or revision or None)


def looks_like_path(text: str, repo: str) -> bool:
    """Whether `text` is meant as a path: rooted, relative to here or home, or deeper than org/name."""
    other = [s for s in (os.sep, os.altsep) if s and s != "/"]  # Windows' backslash
    deeper = repo.count("/") > 1 or any(s in repo for s in other)
    return text.startswith(("/", ".", "~", os.sep)) or deeper


def check_repo_id(text: str, repo: str) -> None:
    """huggingface_hub's own rules for a repository id (characters, length, no `--` or `..`)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        raise ModelError(f"{text!r} is neither a directory nor {HUB_FORM}: {e}") from None
