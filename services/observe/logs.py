"""One logging setup for every process: text with an ISO-8601 timestamp, or one JSON object a line.

    setup_logging("scorer")                          # text, or JSON when CHEEMS_LOG_FORMAT=json
    setup_logging("train", log_format="json", level="DEBUG", rank=1)
    with log_context(request_id="r-1"):
        log.debug("scored")                          # ... carries request_id=r-1

A text line: `2026-11-27T19:08:51.123+00:00 INFO services.scorer.server: scored [request_id=r-1]` (with
`[rank N]` after the level under torchrun). A JSON line (python-json-logger) has `time`, `level`, `logger`,
`message`, `service`, `rank` (when given) and the ids bound where it was logged: `request_id`, `training_id`,
`run_id` (`log_context`, or `bind` for the whole process), `trace_id` and `span_id` (OpenTelemetry's current span,
when OpenTelemetry is in use); a traceback is the `exc_info` field of its line. Every record goes through
`redaction.RedactFilter` first: no token, password or Authorization value reaches the output.

One handler on the root logger, on stderr: every library's records (uvicorn's too, when it runs with
`log_config=None`; Python's warnings) come out in the same form. Calling `setup_logging` again replaces it (the
command line sets up "cheems", then a service command names its service). In JSON mode, uncaught exceptions are
logged lines too, and progress bars are turned off (here and in the processes started from here): a log holds
nothing but JSON lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from cheems.settings import env_name, setting
from services.observe.redaction import RedactFilter, redact

LOG_FORMAT_ENV = env_name("log_format")  # CHEEMS_LOG_FORMAT
FORMATS = ("text", "json")
BOUND_IDS = ("request_id", "training_id", "run_id")  # what log_context and bind take
TRACE_IDS = ("trace_id", "span_id")  # read from OpenTelemetry's current span
IDS = BOUND_IDS + TRACE_IDS
QUIET_BARS = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS")  # tqdm's own switch; transformers' and the Hub's

_context_ids: ContextVar[Mapping[str, str] | None] = ContextVar("cheems_log_ids", default=None)
_process_ids: dict[str, str] = {}


def _checked(ids: Mapping[str, object]) -> dict[str, str]:
    unknown = sorted(set(ids) - set(BOUND_IDS))
    if unknown:
        raise ValueError(f"log ids must be among {', '.join(BOUND_IDS)}, got {', '.join(unknown)}")
    return {k: str(v) for k, v in ids.items() if v is not None and v != ""}


@contextlib.contextmanager
def log_context(**ids: object) -> Iterator[None]:
    """Every line logged inside (in this thread or task) carries `ids`; None or "" values are left out."""
    token = _context_ids.set({**(_context_ids.get() or {}), **_checked(ids)})
    try:
        yield
    finally:
        _context_ids.reset(token)


def bind(**ids: object) -> None:
    """Ids every line of this process carries, whatever thread logs it (a training run's `training_id`); an id
    given as None or "" is unbound."""
    given = _checked(ids)
    for key in set(ids) - set(given):
        _process_ids.pop(key, None)
    _process_ids.update(given)


def trace_ids() -> dict[str, str]:
    """The trace and span ids of OpenTelemetry's current span; {} when OpenTelemetry is not in use or no span is."""
    trace = sys.modules.get("opentelemetry.trace")  # imported by whoever set tracing up; never imported here
    if trace is None:
        return {}
    span = trace.get_current_span().get_span_context()
    if not span.is_valid:
        return {}
    return {"trace_id": format(span.trace_id, "032x"), "span_id": format(span.span_id, "016x")}


def current_ids() -> dict[str, str]:
    """The ids a line logged here and now carries."""
    return {**_process_ids, **(_context_ids.get() or {}), **trace_ids()}


class ContextFilter(logging.Filter):
    """Puts `service`, `rank` and the current ids on each record (ids given with `extra=` win)."""

    def __init__(self, service: str, rank: int | None) -> None:
        super().__init__()
        self.service, self.rank = service, rank

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        if self.rank is not None:
            record.rank = self.rank
        for key, value in current_ids().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def iso_time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")


class _Prepared(logging.Formatter):
    """A formatter that runs its handler's filters itself as well: a record formatted through another handler
    that borrowed this formatter (tqdm's logging redirect does so) is still named and masked."""

    filters: tuple[logging.Filter, ...] = ()

    def format(self, record: logging.LogRecord) -> str:
        for f in self.filters:
            f.filter(record)
        return super().format(record)


class TextFormatter(_Prepared):
    """`TIME LEVEL [rank N] logger: message [id=value ...]`, the traceback on the lines after."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_time(record)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        rank = getattr(record, "rank", None)
        if rank is not None:
            head, _, rest = text.partition(f" {record.levelname} ")
            text = f"{head} {record.levelname} [rank {rank}] {rest}"
        ids = " ".join(f"{k}={getattr(record, k)}" for k in IDS if getattr(record, k, None))
        if not ids:
            return text
        first, newline, rest = text.partition("\n")  # after the message, before a traceback
        return f"{first} [{ids}]{newline}{rest}"


class JsonLineFormatter(_Prepared, JsonFormatter):
    """One JSON object a line: time, level, logger, message, then service, rank, ids and any `extra=` fields."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            reserved_attrs=[*RESERVED_ATTRS, "taskName", "color_message"],  # uvicorn's colored copy of the message
            json_ensure_ascii=False,
        )

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_time(record)

    def process_log_record(self, log_record: dict[str, Any]) -> dict[str, Any]:
        """Fields given with `extra=` are masked as messages are (a headers dict, a URL)."""
        return {k: redact(v) if isinstance(v, str) and k not in IDS else v for k, v in log_record.items()}


class CheemsHandler(logging.StreamHandler):
    """The handler `setup_logging` installs (found again by its class, to be replaced). Without a stream of its own
    it writes to `sys.stderr` as it is at each line (as logging's last resort does), so a caller that swaps stderr
    for a while (a test runner, a capture) never leaves it writing to a closed stream."""

    def __init__(self, stream: TextIO | None = None) -> None:
        logging.Handler.__init__(self)
        self._own = stream

    @property
    def stream(self) -> TextIO:
        return self._own if self._own is not None else sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self._own = value


def log_format_of(log_format: str | None) -> str:
    """The format asked for, else CHEEMS_LOG_FORMAT's, else text; ValueError naming where a bad one came from."""
    chosen = (log_format or setting("log_format")).strip().lower() or "text"
    if chosen not in FORMATS:
        where = "log_format" if log_format else LOG_FORMAT_ENV
        raise ValueError(f"{where} must be one of {', '.join(FORMATS)}, got {chosen!r}")
    return chosen


def level_of(level: int | str) -> int:
    """A level given by number or by name (any case); ValueError naming the names for another."""
    if isinstance(level, int):
        return level
    names = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    if level.strip().upper() not in names:
        raise ValueError(f"log level must be one of {', '.join(names)}, got {level!r}")
    return int(getattr(logging, level.strip().upper()))


SERVER_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")  # loggers that configure themselves


def setup_logging(
    service: str,
    *,
    log_format: str | None = None,
    level: int | str = "INFO",
    rank: int | None = None,
    stream: TextIO | None = None,
) -> CheemsHandler:
    """Install the process's one root handler (on `stream`, default stderr) and set the root level.

    `log_format`: "text" or "json" (None: CHEEMS_LOG_FORMAT, default text). `rank`: the torchrun rank shown
    on each line. In JSON mode an uncaught exception (in any thread) is logged as one line, and Python's
    warnings go through logging in either mode.
    """
    chosen, number = log_format_of(log_format), level_of(level)
    handler = CheemsHandler(stream)
    formatter = JsonLineFormatter() if chosen == "json" else TextFormatter()
    formatter.filters = (ContextFilter(service, rank), RedactFilter())
    for f in formatter.filters:
        handler.addFilter(f)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):  # ours from before, and basicConfig's (a plain StreamHandler); not pytest's
        if isinstance(old, CheemsHandler) or type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    for name in SERVER_LOGGERS:  # a uvicorn started with its default config keeps handlers of its own (and stops
        server = logging.getLogger(name)  # propagation): its lines go through the one root handler instead
        for old in list(server.handlers):
            server.removeHandler(old)
        server.propagate = True
    logging.captureWarnings(True)
    _hook_uncaught(chosen == "json")
    if chosen == "json":  # progress bars are not lines: none in this process (read when tqdm or the Hub's
        for name in QUIET_BARS:  # library is first imported) nor in the processes it starts
            os.environ.setdefault(name, "1")
    return handler


_DEFAULT_HOOKS = (sys.excepthook, threading.excepthook)


def _hook_uncaught(as_log: bool) -> None:
    if not as_log:
        sys.excepthook, threading.excepthook = _DEFAULT_HOOKS
        return

    def uncaught(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        logging.getLogger("uncaught").critical("uncaught %s: %s", kind.__name__, error, exc_info=(kind, error, trace))

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            where = f"thread {args.thread.name}" if args.thread is not None else "a thread"
            logging.getLogger("uncaught").critical(
                "uncaught %s in %s", args.exc_type.__name__, where, exc_info=(args.exc_type, args.exc_value,
                                                                             args.exc_traceback)
            )  # fmt: skip

    sys.excepthook, threading.excepthook = uncaught, uncaught_in_thread
