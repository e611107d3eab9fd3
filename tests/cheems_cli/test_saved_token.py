"""The operator's token that `cheems up` saved goes only to the addresses it listens on (recorded beside the token)
or over TLS: `cheems score` and `cheems status` pointed at a listener that is not ours send no token and say so,
while a token the user gives (CHEEMS_TOKEN, --token-file) goes where they point it, and `cheems annotate reassign` /
`void` over TLS (--tls-ca) send it to any address. The listener is a real gRPC server on another port (plaintext or
TLS) that records the metadata of every call it receives."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from click.testing import Result
from typer.testing import CliRunner

from cheems.processes.ports import free_port
from cheems_cli.main import app
from services.store.migrate import upgrade
from tests.services.accounts import Recorder, listening
from tests.services.tls import self_signed

SAVED = "chm_saved-operator-Xq7Lm2Vb9Tz4Rk8Wn3Pd6Hs1"  # what `cheems up` wrote into its token file
MINE = "chm_users-own-token-Yf5Ja8Qc2Gu7Ne4Kx9Mt3"


@pytest.fixture
def stranger() -> Iterator[tuple[str, Recorder]]:
    """A listener on a port of this machine that is not one of `cheems up`'s."""
    recorder = Recorder()
    server = grpc.server(ThreadPoolExecutor(2), handlers=[recorder])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", recorder
    server.stop(None)


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory where `cheems up` ran: out/up/accounts/operator.token and the addresses it listens on."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHEEMS_TOKEN", raising=False)
    monkeypatch.delenv("CHEEMS_TOKEN_FILE", raising=False)
    monkeypatch.delenv("CHEEMS_SCORER_TOKEN", raising=False)
    monkeypatch.delenv("CHEEMS_SCORER_TOKEN_FILE", raising=False)
    accounts = tmp_path / "out" / "up" / "accounts"
    accounts.mkdir(parents=True)
    (accounts / "operator.token").write_text(SAVED + "\n")
    (accounts / "operator.addresses").write_text("127.0.0.1:50051\n127.0.0.1:50052\n")
    return accounts


def score(target: str, *more: str) -> Result:
    return CliRunner().invoke(app, ["score", "--prompt", "你好", "--response", "好", "--model-url", target, *more])


def test_score_sends_no_saved_token_to_a_listener_that_is_not_ours(saved: Path, stranger: tuple[str, Recorder]) -> None:
    target, recorder = stranger
    result = score(target)
    assert result.exit_code == 2, result.output
    assert recorder.seen and recorder.authorizations() == []  # called, without a credential
    assert f"note: no token sent to {target}" in result.output
    assert SAVED not in result.output


def test_the_saved_token_goes_to_an_address_it_was_saved_for(saved: Path, stranger: tuple[str, Recorder]) -> None:
    target, recorder = stranger
    (saved / "operator.addresses").write_text(f"127.0.0.1:50051\n{target}\n")  # as if `cheems up` listened there
    result = score(target)
    assert recorder.authorizations() == [f"Bearer {SAVED}"], result.output
    assert "note:" not in result.output
    (saved / "operator.addresses").unlink()  # no record (a `cheems up` of before): sent nowhere
    score(target)
    assert recorder.authorizations() == [f"Bearer {SAVED}"]


def test_a_token_the_user_gives_goes_where_they_point(
    saved: Path, stranger: tuple[str, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, recorder = stranger
    monkeypatch.setenv("CHEEMS_TOKEN", MINE)
    score(target)
    assert recorder.authorizations() == [f"Bearer {MINE}"]


def test_status_sends_no_saved_token_to_a_scorer_port_that_is_not_ours(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder()
    server = grpc.server(ThreadPoolExecutor(2), handlers=[recorder])
    while True:  # the scorer's port of a block (ports_from + 1) where a stranger listens
        port = free_port()
        if port > 1000 and server.add_insecure_port(f"127.0.0.1:{port}"):
            break
    server.start()
    db = f"sqlite:///{tmp_path / 'cheems.db'}"
    upgrade(db)
    try:
        args = ["status", "--db", db, "--ports-from", str(port - 1), "--timeout", "0.5"]
        result = CliRunner().invoke(app, args)
    finally:
        server.stop(None)
    assert result.exit_code == 0, result.output
    assert recorder.seen and recorder.authorizations() == []
    assert f"note: no token sent to 127.0.0.1:{port}" in result.output and SAVED not in result.output


@pytest.mark.parametrize("command", [["reassign", "t1", "--to", "乙"], ["void", "a1"]], ids=["reassign", "void"])
def test_annotate_corrections_send_the_saved_token_over_tls(saved: Path, tmp_path: Path, command: list[str]) -> None:
    cert, key = self_signed(tmp_path)
    recorder = Recorder()
    with listening(recorder, grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])) as port:
        # an address not among those saved, but the server proves who it is
        args = ["annotate", *command, "--reason", "测试", "--annotation-url", f"localhost:{port}"]
        result = CliRunner().invoke(app, [*args, "--tls-ca", str(cert)])
    assert "UNIMPLEMENTED" in result.output  # the call reached the server
    assert recorder.authorizations() == [f"Bearer {SAVED}"], result.output
    assert "note:" not in result.output
