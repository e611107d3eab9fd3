"""Files and folders replaced whole: written aside, synced to disk, then renamed into place.

    write_atomic(directory / "position.json", text)   # a reader sees the old file or the new one, never part
    sync_tree(staging)                                 # every file and folder under it on disk, before a rename
    exchange(staging, directory)                       # two paths swapped in one step (Linux), False elsewhere

A kill (or a power cut) at any instant must leave a marker file or a model folder either as it was or as it is
meant to be: what a rename publishes is synced first, and the folder holding the rename is synced after it.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import tempfile
from pathlib import Path
from typing import Any

PARTIAL = ".partial"  # the suffix of write_atomic's temporary files: a kill may leave one, nothing reads it
AT_FDCWD = -100
RENAME_EXCHANGE = 2  # renameat2's flag (linux/fs.h)


def write_atomic(path: Path, text: str) -> None:
    """`text` (UTF-8) at `path`: written to a temporary file in the same folder, synced, renamed over `path`,
    and the folder synced; on any error `path` is left as it was and the temporary file removed."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=PARTIAL, dir=path.parent)
    try:
        try:
            _write_all(fd, text.encode("utf-8"))
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes owner-only files; honour the umask as open() does
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    sync_folder(path.parent)


def sync_tree(root: Path) -> None:
    """fsync every file under `root`, then every folder, deepest first (their entries), `root` last."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            _sync(os.path.join(folder, name))
        sync_folder(Path(folder))


def sync_folder(folder: Path) -> None:
    """fsync a folder: the names created, renamed or removed in it reach the disk."""
    try:
        _sync(str(folder))
    except OSError as e:
        if e.errno != errno.EINVAL:  # a filesystem that cannot sync a folder (some network ones) syncs on close
            raise


def exchange(a: Path, b: Path) -> bool:
    """Swap the two existing paths `a` and `b` in one step (renameat2 with RENAME_EXCHANGE): no instant where
    either is missing. False, with nothing changed, where the platform or the filesystem cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


@functools.cache
def _renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2  # glibc 2.28+
    except (AttributeError, OSError, TypeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read where Linux shows it (setting it to read it would briefly change it for every
    thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask
