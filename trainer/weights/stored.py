"""Tensors in a safetensors file, read by rows: the header checked against the file and the model, every read
checked for its length.

    where = stored_tensors(path)                 # name -> Stored, from the header (8 bytes of length, then JSON)
    check_target(where[name], tensor)            # the stored shape and dtype against the model's whole tensor
    read_rows(local, where[name], dim, start, stop)

A header says where each tensor's bytes lie. A file cut short (a copy still running, a full disk) or a header
that does not match the model would otherwise load quietly wrong: rows past the file's end stay zeros, a
shorter stored tensor reads its neighbour's bytes. Each such mismatch is a ModelError naming the file and the
tensor: when the header is parsed (bytes past the file's end, a byte count that is not the shape's times the
dtype's), before anything is read (the stored shape and dtype against the model's) and on every read (the
bytes `readinto` returned).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cheems.errors import ModelError

CHUNK_BYTES = 64 * 2**20  # rows read and copied at a time: the host memory a load adds
DTYPES = {  # safetensors' dtype names
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True)
class Stored:
    """A tensor in a safetensors file: its dtype name, shape, byte offset from the file's start and length."""

    file: Path
    key: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def __str__(self) -> str:
        return f"{self.file}: tensor {self.key} ({self.dtype} {list(self.shape)})"


def stored_tensors(file: Path) -> dict[str, Stored]:
    """The tensors a safetensors file holds, read from its header and checked against the file's size."""
    size = file.stat().st_size
    with file.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if size < 8 or 8 + length > size:
            raise ModelError(f"{file}: cut short or not safetensors: a {length}-byte header, {size} bytes in all")
        try:
            header = json.loads(f.read(length))
        except ValueError as e:
            raise ModelError(f"{file}: its safetensors header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ModelError(f"{file}: its safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    return {key: _entry(file, key, entry, 8 + length, size) for key, entry in header.items()}


def _entry(file: Path, key: str, entry: Any, start: int, size: int) -> Stored:
    """One header entry as a Stored, refused when malformed, past the file's end or of the wrong length."""
    try:
        begin, end = map(int, entry["data_offsets"])
        shape = tuple(map(int, entry["shape"]))
        stored = Stored(file, key, str(entry["dtype"]), shape, start + begin, end - begin)
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{file}: tensor {key}: a malformed header entry {entry!r}") from None
    if begin < 0 or stored.nbytes < 0 or start + end > size:
        raise ModelError(f"{stored} lies at bytes [{start + begin}, {start + end}) of a {size}-byte file: cut short?")
    dtype = DTYPES.get(stored.dtype)
    if dtype is not None and stored.nbytes != (wanted := math.prod(stored.shape) * dtype.itemsize):
        raise ModelError(f"{stored} takes {stored.nbytes} bytes in the file, its shape and dtype make {wanted}")
    return stored


def check_target(stored: Stored, target: torch.Tensor) -> None:
    """Refuse to load `stored` into `target` (the whole tensor: a DTensor's global shape, not a rank's part)
    unless the shapes are equal and the dtypes too, or both floating point (converted as they are copied: a
    bfloat16 checkpoint into a float32 model)."""
    if stored.shape != tuple(target.shape):
        raise ModelError(f"{stored}: stored with shape {list(stored.shape)}, the model's is {list(target.shape)}")
    dtype = DTYPES.get(stored.dtype)
    if dtype is not None and dtype != target.dtype and not (dtype.is_floating_point and target.dtype.is_floating_point):
        raise ModelError(f"{stored}: stored as {stored.dtype} ({dtype}), the model's is {target.dtype}")


def read_rows(local: torch.Tensor, stored: Stored, dim: int, start: int, stop: int) -> None:
    """Rows [start, stop) along `dim` of the stored tensor into `local`, CHUNK_BYTES at a time. Rows along the
    first dimension (FSDP2's, or a whole tensor) are contiguous in the file: read with plain reads, no mapping,
    so the host memory a load adds is one chunk; another dimension is read through safetensors' slices."""
    dtype = DTYPES.get(stored.dtype)
    if dim != 0 or dtype is None:
        _read_slices(local, stored, dim, start, stop)
        return
    if not stored.shape:
        start, stop, local = 0, 1, local.reshape(1)
    row_bytes = math.prod(stored.shape[1:]) * dtype.itemsize
    if local.numel() == 0 or row_bytes == 0:
        return
    step = max(1, CHUNK_BYTES // row_bytes)
    with stored.file.open("rb") as f:
        for first in range(start, stop, step):
            last = min(stop, first + step)
            buffer = bytearray((last - first) * row_bytes)
            f.seek(stored.offset + first * row_bytes)
            read = f.readinto(buffer)
            if read != len(buffer):
                at = stored.offset + first * row_bytes
                raise ModelError(f"{stored}: {read} of {len(buffer)} bytes read at byte {at}: the file is cut short")
            rows = torch.frombuffer(buffer, dtype=dtype).view(last - first, *stored.shape[1:])
            local.narrow(0, first - start, last - first).copy_(rows)


def _read_slices(local: torch.Tensor, stored: Stored, dim: int, start: int, stop: int) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(stored.file, framework="pt") as handle:
            part = handle.get_slice(stored.key)[(*(slice(None) for _ in range(dim)), slice(start, stop))]
    except SafetensorError as e:
        raise ModelError(f"{stored}: {e}") from e
    if part.shape != local.shape:  # copy_ would broadcast a smaller part silently
        raise ModelError(
            f"{stored}: rows {start}:{stop} along dim {dim} read as {list(part.shape)}, {list(local.shape)} wanted"
        )
    local.copy_(part)
