"""The objects of one bucket as files under a folder, written durably: the object store's storage half.

    bucket = Bucket(Path("store/buckets/tansu"), staging=Path("store/staging"))
    stat = bucket.write("topics/a/0.batch", data)     # staged, fsynced, renamed, its folder fsynced
    objects, prefixes, more_after = bucket.scan("topics/", "/", after="", limit=1000)

Key `a/b/c` is the file `a/b/c`; a key that could leave the folder (empty, `.`, `..` parts, NUL) is refused.
A write is a new file renamed over the old, so a reader holds either version whole, and a crash leaves no
half-written object (a staged file left behind was never acknowledged: `services.bus.objectstore` clears them).
"""

from __future__ import annotations

import bisect
import hashlib
import os
import stat
import uuid
from pathlib import Path
from typing import Any

MAX_KEY_BYTES = 1024  # S3's own limit


class S3Error(Exception):
    """An S3 error reply: HTTP status, S3 code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def etag_of(stat: os.stat_result) -> str:
    """A strong validator of one version of a file: every write renames a new file (a new inode and time)."""
    return (
        '"'
        + hashlib.blake2b(f"{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_size}".encode(), digest_size=12).hexdigest()
        + '"'
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Bucket:
    """One bucket's objects as files: key `a/b/c` is the file `a/b/c` under the bucket's folder."""

    def __init__(self, root: Path, staging: Path) -> None:
        self.root, self.staging = root, staging

    def path(self, key: str) -> Path:
        raw = key.encode("utf-8", "surrogatepass")
        parts = key.split("/")
        if not key or len(raw) > MAX_KEY_BYTES or "\x00" in key or any(p in ("", ".", "..") for p in parts):
            raise S3Error(400, "InvalidArgument", f"key {key[:80]!r}: empty, over {MAX_KEY_BYTES} bytes, NUL, or an "
                                                  "empty, '.' or '..' part")  # fmt: skip
        if parts[0].startswith(".staging"):
            raise S3Error(400, "InvalidArgument", f"key {key[:80]!r}: reserved")
        return self.root.joinpath(*parts)

    def stat(self, key: str) -> os.stat_result | None:
        """The object's file's status; None when there is no such object (a folder of other keys is none)."""
        try:
            found = self.path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return None if stat.S_ISDIR(found.st_mode) else found

    def write(self, key: str, data: bytes) -> os.stat_result:
        """Write `data` as the object `key`, durably (staged, fsynced, renamed, folder fsynced)."""
        target = self.path(key)
        self._folders(target.parent)
        staged = self.staging / f"{uuid.uuid4().hex}.part"
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(staged, target)
        except (IsADirectoryError, NotADirectoryError):
            staged.unlink(missing_ok=True)
            raise S3Error(409, "InvalidArgument", f"key {key[:80]!r} collides with a folder of other keys") from None
        _fsync_dir(target.parent)
        return target.stat()

    def delete(self, key: str) -> None:
        target = self.path(key)
        try:
            target.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return
        _fsync_dir(target.parent)

    def scan(
        self, prefix: str, delimiter: str, after: str, limit: int
    ) -> tuple[list[tuple[str, os.stat_result]], list[str], str]:
        """(objects, common prefixes, the last key returned when more follow) in key order, as ListObjectsV2."""
        keys = sorted(k for k in self._walk(prefix) if k.startswith(prefix) and k > after)
        objects: list[tuple[str, os.stat_result]] = []
        prefixes: list[str] = []
        last = ""
        for key in keys:
            cut = key.find(delimiter, len(prefix)) if delimiter else -1
            if cut >= 0:
                common = key[: cut + len(delimiter)]
                if prefixes and prefixes[-1] == common:
                    continue
                if common <= after:
                    continue
                entry: Any = common
            else:
                found = self.stat(key)
                if found is None:
                    continue
                entry = (key, found)
            if len(objects) + len(prefixes) == limit:
                return objects, prefixes, last
            if isinstance(entry, str):
                prefixes.append(entry)
                last = self._last_under(entry, keys)
            else:
                objects.append(entry)
                last = key
        return objects, prefixes, ""

    @staticmethod
    def _last_under(common: str, keys: list[str]) -> str:
        """The greatest key under a common prefix (`keys` sorted: they stand together): a continuation after it
        skips the whole prefix."""
        after = common[:-1] + chr(ord(common[-1]) + 1)  # the least string past every key that starts with `common`
        return keys[bisect.bisect_left(keys, after) - 1]

    def _walk(self, prefix: str) -> list[str]:
        """Every key under the folder that holds `prefix`'s complete parts."""
        parts = prefix.split("/")[:-1]
        start = self.root.joinpath(*parts) if parts else self.root
        if any(p in ("", ".", "..") for p in parts) or not start.is_dir():
            return []
        found: list[str] = []
        stack = [start]
        while stack:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        found.append(Path(entry.path).relative_to(self.root).as_posix())
        return found

    def _folders(self, folder: Path) -> None:
        missing = []
        while not folder.is_dir():
            missing.append(folder)
            folder = folder.parent
        for made in reversed(missing):
            try:
                made.mkdir(mode=0o700)
            except FileExistsError:
                if not made.is_dir():
                    raise S3Error(409, "InvalidArgument", "a key collides with a folder of other keys") from None
            _fsync_dir(made.parent)
