"""Export's file names: a plain name in the export folder (made owner-only), anything else refused naming `name`."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.annotation.exports import MAX_NAME, ExportConfig, check_name, export_path
from services.store.errors import InvalidRecord


@pytest.mark.parametrize("name", ["bench-2026.jsonl", "b", "P_1.v2.jsonl", "a" * MAX_NAME, "x..y"])
def test_a_plain_name_is_a_file_in_the_folder(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "deep" / "exports"
    path = export_path(ExportConfig(str(folder)), name)
    assert path == folder / name and path.parent.is_dir()
    assert folder.stat().st_mode & 0o077 == 0  # owner-only


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "../x", "a/b", "/etc/passwd", "a\\b", ".env", "a\0b", "a b", "$(id).jsonl", "a" * (MAX_NAME + 1),
     "名字.jsonl", "x\n"],
)  # fmt: skip
def test_anything_but_a_plain_name_is_refused_naming_the_field(tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidRecord, match=r"^name: "):
        export_path(ExportConfig(str(tmp_path / "exports")), name)
    with pytest.raises(InvalidRecord, match=r"^name: "):
        check_name(name)


def test_the_folder_is_required() -> None:
    with pytest.raises(ValueError, match="folder"):
        ExportConfig("")
