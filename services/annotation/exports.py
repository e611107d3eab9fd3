"""Where `Export` writes: a file NAME under the annotation service's export folder, never a path.

    config = ExportConfig(folder="out/up/exports")
    export_path(config, "bench-2026.jsonl")     # Path("out/up/exports/bench-2026.jsonl"), the folder made (0700)
    export_path(config, "../cheems.db")         # InvalidRecord naming the field `name`

A caller with the operator's role chooses what is written (the rankings, a prompt's text included) but not where:
the name is letters, digits and `._-` (no separator, no leading dot, at most MAX_NAME characters), so a request
can neither leave the folder nor replace a file the service does not own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from services.store.errors import InvalidRecord

MAX_NAME = 128
NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_NAME - 1}}}")
DEFAULT_FOLDER = "out/cheems/exports"  # under the default data directory (`cheems.settings`' data_dir)


@dataclass(frozen=True)
class ExportConfig:
    folder: str = DEFAULT_FOLDER  # every Export file is written here, by name (`cheems up`: <data_dir>/exports)

    def __post_init__(self) -> None:
        if not self.folder or "\0" in self.folder:
            raise ValueError(f"folder: a directory is required, got {self.folder!r}")


def check_name(name: str) -> str:
    """`name` when it is a plain file name, else InvalidRecord saying what a name may be."""
    if not name:
        raise InvalidRecord("name: required: a file name such as bench-2026.jsonl, written in the export folder")
    if NAME.fullmatch(name) is None:
        raise InvalidRecord(
            f"name: {name[:MAX_NAME]!r} is not a file name: use letters, digits and ._- (no / or \\, no leading dot, "
            f"at most {MAX_NAME} characters); the file is written in the service's export folder"
        )
    return name


def export_path(config: ExportConfig, name: str) -> Path:
    """The file `name` in the export folder (made, owner-only, when missing)."""
    folder = Path(config.folder)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder / check_name(name)
