"""One logging setup: text lines with ISO-8601 times, JSON lines with time/level/logger/service/rank and the ids
bound where they were logged, secrets masked in messages, arguments, tracebacks and extra fields, uvicorn's
lines in the same form, an uncaught exception one JSON line. (tests/conftest.py puts logging back after each test.)"""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest
from starlette.applications import Starlette

from services.observe.logs import QUIET_BARS, bind, current_ids, log_context, setup_logging
from services.observe.redaction import redact
from services.web import HttpServer

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "chm_Xq7Lm2Vb9Tz4Rk8Wn3Pd6Hs1Jc5Fg0Ye2Ua4Io6Pk8Ql"  # the shape services.store.accounts.new_token makes


def lines_of(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_a_text_line_has_an_iso_time_level_logger_message_rank_and_ids() -> None:
    out = io.StringIO()
    setup_logging("scorer", log_format="text", level="DEBUG", rank=1, stream=out)
    with log_context(request_id="请求-1", run_id="run-7"):
        logging.getLogger("services.scorer.server").debug("scored %d responses", 3)
    logging.getLogger("services.scorer.server").info("outside")
    first, second = lines_of(out)
    stamp, level, rank, logger, message = first.split(" ", 4)
    assert datetime.fromisoformat(stamp).utcoffset() is not None  # ISO-8601 with its offset
    assert (level, rank, logger) == ("DEBUG", "[rank", "1]") and message.startswith("services.scorer.server: ")
    assert message.endswith("scored 3 responses [request_id=请求-1 run_id=run-7]")
    assert second.endswith("services.scorer.server: outside")  # the ids went with the block


def test_a_json_line_has_time_level_logger_message_service_rank_and_ids() -> None:
    out = io.StringIO()
    setup_logging("train", log_format="json", level="INFO", rank=0, stream=out)
    bind(training_id="t-42")
    with log_context(run_id="r-1"), log_context(request_id="q-9"):
        logging.getLogger("trainer.train").info("第 %d 步", 7)
    logging.getLogger("trainer.train").debug("below the level")
    [line] = lines_of(out)
    record = json.loads(line)
    assert record["level"] == "INFO" and record["logger"] == "trainer.train" and record["message"] == "第 7 步"
    assert record["service"] == "train" and record["rank"] == 0
    assert {k: record[k] for k in ("training_id", "run_id", "request_id")} == {
        "training_id": "t-42",
        "run_id": "r-1",
        "request_id": "q-9",
    }
    assert datetime.fromisoformat(record["time"]).utcoffset() is not None
    assert "第" in line  # UTF-8 as it is, not \\u escapes


def test_json_mode_is_chosen_by_the_environment_and_a_bad_format_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setenv("CHEEMS_LOG_FORMAT", "json")
    setup_logging("ingestion", stream=out)
    logging.getLogger("x").warning("hello")
    assert json.loads(out.getvalue())["service"] == "ingestion"
    assert all(os.environ[name] == "1" for name in QUIET_BARS)  # no progress bar among the lines
    monkeypatch.setenv("CHEEMS_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="CHEEMS_LOG_FORMAT must be one of text, json, got 'xml'"):
        setup_logging("ingestion", stream=out)
    with pytest.raises(ValueError, match="log_format must be one of text, json, got 'yaml'"):
        setup_logging("ingestion", log_format="yaml", stream=out)


def test_setting_up_again_replaces_the_handler_rather_than_adding_one() -> None:
    first, second = io.StringIO(), io.StringIO()
    setup_logging("cheems", log_format="text", stream=first)
    setup_logging("annotation", log_format="json", stream=second)
    logging.getLogger("x").warning("once")
    assert first.getvalue() == "" and json.loads(second.getvalue())["service"] == "annotation"


def test_ids_are_checked_and_left_out_when_empty() -> None:
    with (
        pytest.raises(ValueError, match="log ids must be among request_id, training_id, run_id, got user"),
        log_context(user="张三"),
    ):
        pass
    with log_context(request_id="", run_id=None, training_id="t"):
        assert current_ids() == {"training_id": "t"}
    assert current_ids() == {}


def test_a_context_stays_with_its_thread() -> None:
    seen: dict[str, dict[str, str]] = {}
    with log_context(request_id="main"):
        worker = threading.Thread(target=lambda: seen.setdefault("thread", current_ids()))
        worker.start()
        worker.join()
        seen["main"] = current_ids()
    assert seen == {"thread": {}, "main": {"request_id": "main"}}


@pytest.mark.parametrize(
    "secret_text",
    [
        f"authorization: Bearer {TOKEN}",
        f"{{'authorization': 'Bearer {TOKEN}'}}",  # an HTTP headers dict
        f"(('authorization', 'bearer {TOKEN}'),)",  # gRPC invocation metadata
        f"Authorization=Basic {TOKEN}",
        f"sent Bearer {TOKEN[4:]} to the scorer",
        f"GET /get_reward?model=a&token={TOKEN[4:]}",
        f"password={TOKEN[4:]} user=cheems",
        f'{{"api_key": "{TOKEN[4:]}"}}',
        f"VLLM_API_KEY={TOKEN[4:]} python -m vllm",  # an engine's environment
        f"postgresql+psycopg://cheems:{TOKEN[4:]}@db:5432/cheems",
        f"the token is {TOKEN}",
    ],
)
def test_redaction_removes_every_form_of_secret(secret_text: str) -> None:
    masked = redact(secret_text)
    assert TOKEN[4:] not in masked and "***" in masked
    assert redact(masked) == masked  # masking twice changes nothing


def test_redaction_leaves_ordinary_text_alone() -> None:
    text = "missing or wrong bearer token: send `authorization: Bearer TOKEN`; 张三 scored 0.73 on rm-1"
    assert redact(text) == text.replace("Bearer TOKEN", "Bearer ***")
    assert redact("model chm_ and token-free text") == "model chm_ and token-free text"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_secret_reaches_the_output_from_a_message_its_args_a_traceback_or_extra_fields(log_format: str) -> None:
    out, log = io.StringIO(), logging.getLogger("services.access")
    setup_logging("scorer", log_format=log_format, level="DEBUG", stream=out)
    log.debug("call metadata %s", (("authorization", f"Bearer {TOKEN}"),))
    log.info("headers %r", {"authorization": f"Bearer {TOKEN}"})
    log.warning("query", extra={"url": f"http://h/get_reward?token={TOKEN}"})
    try:
        raise PermissionError(f"refused token={TOKEN}")
    except PermissionError:
        log.exception("refused")
    written = out.getvalue()
    assert TOKEN not in written and TOKEN[4:] not in written and written.count("***") >= 4
    if log_format == "json":
        records = [json.loads(line) for line in written.splitlines()]  # every line is one JSON record
        ours = [r for r in records if r["logger"] == "services.access"]  # not a line another test's thread logged
        assert len(ours) == 4 and "Traceback" in ours[-1]["exc_info"]  # the traceback inside its one line


def test_uvicorn_logs_through_the_same_handler() -> None:
    """Even after a uvicorn started with its default config (handlers of its own, no propagation) in this process."""
    import logging.config

    from uvicorn.config import LOGGING_CONFIG

    logging.config.dictConfig(LOGGING_CONFIG)
    assert logging.getLogger("uvicorn").propagate is False  # what the setup has to undo
    out = io.StringIO()
    setup_logging("leaderboard", log_format="json", stream=out)
    server = HttpServer(Starlette()).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")  # uvicorn warns: Invalid HTTP request received
            sock.recv(1024)
    finally:
        server.stop()
    records = [json.loads(line) for line in lines_of(out)]
    warned = [r for r in records if r["logger"].startswith("uvicorn")]
    assert warned and all(r["service"] == "leaderboard" and r["level"] == "WARNING" for r in warned), records


def test_a_line_logged_inside_a_span_carries_its_trace_and_span_ids() -> None:
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    out = io.StringIO()
    setup_logging("evaluation", log_format="json", stream=out)
    tracer = sdk.TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("StartRun") as span:
        logging.getLogger("evaluator.server").warning("in a span")
    logging.getLogger("evaluator.server").warning("outside")
    inside, outside = (json.loads(line) for line in lines_of(out))
    context = span.get_span_context()
    assert inside["trace_id"] == format(context.trace_id, "032x") and inside["span_id"] == format(
        context.span_id, "016x"
    )
    assert "trace_id" not in outside


def test_an_uncaught_exception_in_a_thread_is_one_json_line() -> None:
    out = io.StringIO()
    setup_logging("eval-worker", log_format="json", stream=out)
    thread = threading.Thread(target=lambda: 1 / 0, name="score-calls")
    thread.start()
    thread.join()
    [record] = [json.loads(line) for line in lines_of(out)]
    assert record["level"] == "CRITICAL" and "thread score-calls" in record["message"]
    assert "ZeroDivisionError" in record["exc_info"]


def test_an_uncaught_exception_of_a_process_is_one_json_line() -> None:
    code = (
        "from services.observe.logs import setup_logging\n"
        "setup_logging('judge', log_format='json')\n"
        f"raise RuntimeError('judge endpoint refused authorization: Bearer {TOKEN}')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stdout == ""
    [line] = run.stderr.splitlines()
    record = json.loads(line)
    assert record["service"] == "judge" and record["level"] == "CRITICAL" and "RuntimeError" in record["exc_info"]
    assert TOKEN not in line and TOKEN[4:] not in line
