"""Safetensors files read by rows (trainer.weights.stored): a header that does not fit its file, and a read that
comes back short, are ModelErrors naming the file and the tensor, on the plain-read path and the slices path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from cheems.errors import ModelError
from trainer.weights.stored import read_rows, stored_tensors

ROWS = torch.arange(24, dtype=torch.float32).reshape(4, 6)


@pytest.fixture
def file(tmp_path: Path) -> Path:
    """Two tensors, `rows` stored last (safetensors orders tensors by name)."""
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(3), "rows": ROWS}, path)
    return path


def rewritten(file: Path, edit: dict[str, object]) -> Path:
    """`file` with the header entry of `rows` edited (the header keeps its length: padded with spaces)."""
    data = file.read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    header["rows"].update(edit)
    text = json.dumps(header, separators=(",", ":")).encode().ljust(length)
    assert len(text) == length
    file.write_bytes(data[:8] + text + data[8 + length :])
    return file


def test_rows_are_read_by_plain_reads_and_by_slices(file: Path) -> None:
    stored = stored_tensors(file)["rows"]
    assert (stored.shape, stored.nbytes) == ((4, 6), 96)
    middle = torch.empty(2, 6)
    read_rows(middle, stored, 0, 1, 3)
    torch.testing.assert_close(middle, ROWS[1:3], rtol=0, atol=0)
    columns = torch.empty(4, 2)
    read_rows(columns, stored, 1, 2, 4)
    torch.testing.assert_close(columns, ROWS[:, 2:4], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("keep", "found"),
    [(4, "cut short or not safetensors"), (20, "cut short or not safetensors"), (-10, "tensor rows (F32 [4, 6]) lies")],
    ids=["length", "header", "data"],
)
def test_a_header_past_the_files_end_is_refused_when_parsed(file: Path, keep: int, found: str) -> None:
    os.truncate(file, keep if keep > 0 else file.stat().st_size + keep)
    with pytest.raises(ModelError, match=rf"^{file}: ") as caught:
        stored_tensors(file)
    assert found in str(caught.value)


@pytest.mark.parametrize(
    ("edit", "found"),
    [
        ({"shape": [5, 6]}, "tensor rows (F32 [5, 6]) takes 96 bytes in the file, its shape and dtype make 120"),
        ({"data_offsets": "x"}, "tensor rows: a malformed header entry"),
    ],
    ids=["byte count", "malformed"],
)
def test_a_header_entry_that_does_not_add_up_is_refused(file: Path, edit: dict[str, object], found: str) -> None:
    with pytest.raises(ModelError) as caught:
        stored_tensors(rewritten(file, edit))
    assert str(caught.value).startswith(f"{file}: {found}"), caught.value


@pytest.mark.parametrize("dim", [0, 1], ids=["plain reads", "slices"])
def test_a_file_cut_short_after_its_header_was_read_is_refused_when_read(file: Path, dim: int) -> None:
    """The bytes `readinto` returned are counted (a file still being copied may shrink or be replaced)."""
    stored = stored_tensors(file)["rows"]
    os.truncate(file, file.stat().st_size - 10)
    target = torch.zeros(4, 6)
    with pytest.raises(ModelError, match=rf"^{file}: tensor rows \(F32 \[4, 6\]\): "):
        read_rows(target, stored, dim, 0, ROWS.shape[dim])
