"""`cheems up`'s preparation of its data directory: the store, token and log folders the owner's only (0700, files
0600), the addresses the operator's token may be sent to recorded beside it, run again unchanged, and stopped by
an account someone revoked."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from cheems.credentials import read_secret
from services.store.accounts import disable
from services.store.db import StoreConfig, create_engine_for, session_scope
from system.accounts import Revoked
from system.plan import SystemConfig, addresses
from system.up import prepare


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The usual umask, 022: what is made is readable by all unless said otherwise."""
    before = os.umask(0o022)
    yield
    os.umask(before)


@pytest.mark.usefixtures("usual_umask")
def test_the_data_directory_is_private_and_the_tokens_addresses_recorded(tmp_path: Path) -> None:
    config = SystemConfig(data_dir=tmp_path / "up", ports_from=20000)
    prepare(config)
    assert mode(config.data_dir) == 0o700 and mode(config.accounts) == 0o700
    assert mode(config.data_dir / "cheems.db") == 0o600
    assert {mode(p) for p in config.accounts.iterdir()} == {0o600}
    saved = config.addresses_file("operator").read_text(encoding="utf-8").split()
    assert saved == sorted(set(addresses(config).values())) and "127.0.0.1:20001" in saved  # the scorer's
    tokens = {p.name: read_secret(p) for p in config.accounts.glob("*.token")}
    prepare(config)  # again, nothing revoked: the same tokens
    assert {p.name: read_secret(p) for p in config.accounts.glob("*.token")} == tokens


def test_an_existing_data_directory_is_narrowed(tmp_path: Path) -> None:
    config = SystemConfig(data_dir=tmp_path / "up")
    config.data_dir.mkdir(mode=0o755)
    (config.data_dir / "cheems.db").touch(mode=0o644)  # as SQLite left it before
    os.chmod(config.data_dir / "cheems.db", 0o644)
    prepare(config)
    assert mode(config.data_dir) == 0o700 and mode(config.data_dir / "cheems.db") == 0o600


def test_a_revoked_account_stops_it(tmp_path: Path) -> None:
    config = SystemConfig(data_dir=tmp_path / "up")
    prepare(config)
    engine = create_engine_for(StoreConfig(config.database))
    try:
        with session_scope(engine) as session:
            disable(session, "operator")
    finally:
        engine.dispose()
    with pytest.raises(Revoked, match="account 'operator' is disabled"):
        prepare(config)
