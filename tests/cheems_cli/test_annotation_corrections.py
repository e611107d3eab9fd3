"""`cheems annotate reassign` and `cheems annotate void` against a real annotation service: an operator moves a task
and voids an annotation, each recorded with the operator as the actor; an annotator's token is refused (exit 2);
a refusal exits as its status stands for (`services.grpc_errors.error_of`: 2 the request, 3 retry later)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from cheems.roles import ANNOTATOR, OPERATOR
from cheems_cli.main import app
from services.annotation.server import host
from services.annotation.service import AnnotationService
from services.hosting import HostConfig
from services.store.accounts import AccountBook
from services.store.assignments import corrections
from services.store.db import session_scope
from tests.services.accounts import Recorder, give, listening


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_an_operator_reassigns_and_voids_from_the_command_line(
    engine: Engine, account: Callable[[str, str], str], tmp_path: Path
) -> None:
    service = AnnotationService(engine)
    prompt, [(task, keys), *_] = service.take_sample("", "比较", [(f"r{i}", f"回答{i}") for i in range(1, 5)],
                                                     ["测试"], None, "t", [], 3)  # fmt: skip
    ops, jia = tmp_path / "ops.token", tmp_path / "jia.token"
    ops.write_text(account("ops", OPERATOR))
    jia.write_text(account("甲", ANNOTATOR))
    account("乙", ANNOTATOR)
    give(engine, "甲", task)
    grpc_host = host(engine, HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    url, runner = f"127.0.0.1:{grpc_host.port}", CliRunner()
    try:
        base = ["--annotation-url", url, "--reason", "甲 is away", "--token-file"]
        refused = runner.invoke(app, ["annotate", "reassign", task, "--to", "乙", *base, str(jia)])
        assert refused.exit_code != 0 and "PERMISSION_DENIED" in refused.output
        moved = runner.invoke(app, ["annotate", "reassign", task, "--to", "乙", *base, str(ops)])
        assert moved.exit_code == 0 and "held before by 甲" in moved.output, moved.output
        service.submit("y1", prompt, "乙", "human", {"order": [[k] for k in keys]}, [], task)
        voided = runner.invoke(app, ["annotate", "void", "y1", *base, str(ops)])
        assert voided.exit_code == 0 and f"prompt {prompt} resolved without it" in voided.output, voided.output
        missing = runner.invoke(app, ["annotate", "void", "nope", *base, str(ops)])
        assert missing.exit_code != 0 and "NOT_FOUND" in missing.output
    finally:
        grpc_host.stop(0)
    with session_scope(engine) as session:
        assert [(c.action, c.actor) for c in corrections(session)] == [
            ("reassigned", "person:ops"),
            ("voided", "person:ops"),
        ]


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [(grpc.StatusCode.DEADLINE_EXCEEDED, 3), (grpc.StatusCode.ALREADY_EXISTS, 2), (grpc.StatusCode.INTERNAL, 1)],
)
def test_a_refusal_exits_as_its_status_stands_for(tmp_path: Path, code: grpc.StatusCode, exit_code: int) -> None:
    (tmp_path / "ops.token").write_text("chm_any-token-the-server-refuses-9Xk2")
    with listening(Recorder(refuse=code)) as port:
        args = ["annotate", "void", "a1", "--reason", "测试", "--annotation-url", f"127.0.0.1:{port}"]
        result = CliRunner().invoke(app, [*args, "--token-file", str(tmp_path / "ops.token")])
    assert result.exit_code == exit_code and f"annotation service: {code.name}: refused" in result.output
