"""What a service's process writes without logging, as JSON log lines too: a long-lived service in JSON mode.

    handler = setup_logging("scorer", log_format="json")
    wrap_output(handler)      # file descriptors 1 and 2 now go through a pipe; each line comes out as JSON

Besides its log records, a service's output holds lines no logger wrote: the C++ processes PyTriton starts
("Signal (15) received."), multiprocessing's resource tracker warning at exit, a library's `print`. They
inherit the process's standard output and error, so those become a pipe read by a thread: a line that is
already a JSON object goes through as it is, any other line becomes a record of the logger `output` (secrets
masked, as every record is). The handler's own lines go straight to the original stream, so a crash's last
record is never left in the pipe; at exit the pipe is drained for up to half a second.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
from typing import TextIO

from services.observe.logs import CheemsHandler

OUTPUT_LOGGER = "output"
DRAIN_SECONDS = 0.5
_wrapped: list[threading.Thread] = []  # once a process
_original: list[TextIO] = []


def wrap_output(handler: CheemsHandler) -> None:
    """Route file descriptors 1 and 2 through a pipe whose lines come out in `handler`'s format, on its stream
    (once a process: a second call only points `handler` at the stream the first one kept)."""
    if _wrapped:
        handler.setStream(_original[0])
        return
    sys.stdout.flush()
    sys.stderr.flush()
    original = os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace", buffering=1)
    handler.setStream(original)  # the handler's lines: straight to the real stderr
    read, write = os.pipe()
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    reader = threading.Thread(target=_relay, args=(read, handler, original), name="output-relay", daemon=True)
    reader.start()
    _wrapped.append(reader)
    _original.append(original)
    atexit.register(_drain, original, reader)


def _relay(read: int, handler: CheemsHandler, original: TextIO) -> None:
    with os.fdopen(read, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            text = line.rstrip("\r\n")
            if text.strip():
                _emit(text, handler, original)


def _emit(text: str, handler: CheemsHandler, original: TextIO) -> None:
    if text.startswith("{"):
        try:
            if isinstance(json.loads(text), dict):
                original.write(text + "\n")  # a line of a child that logs JSON itself
                return
        except ValueError:
            pass
    record = logging.LogRecord(OUTPUT_LOGGER, logging.INFO, __file__, 0, "%s", (text,), None)
    handler.handle(record)


def _drain(original: TextIO, reader: threading.Thread) -> None:
    """At exit: what was written to the pipe is read before the process ends (children may keep it open)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os.dup2(original.fileno(), 1)
    os.dup2(original.fileno(), 2)
    reader.join(DRAIN_SECONDS)
