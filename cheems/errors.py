"""The exception tree of the shared core. Edges (CLI, gRPC, HTTP) map these to exit codes and statuses."""

from __future__ import annotations

from pathlib import Path


class CheemsError(Exception):
    """Base of every error Cheems raises on purpose."""


class PortInUse(CheemsError):
    """The address a server should listen on is taken (another instance?): it refuses to start."""


class FormatError(CheemsError, ValueError):
    """A record in a jsonl file is malformed. The message names the file, the line and the field."""

    def __init__(self, path: str | Path, line: int, message: str, field: str | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = message
        where = f"{self.path}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class ModelError(CheemsError):
    """A checkpoint cannot be loaded or converted."""
