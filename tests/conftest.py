"""Shared fixtures.

`sample_paths`: the bundled sample benchmark. `db_url` and `engine` run each test twice, on a SQLite
file and on the PostgreSQL server every dev and CI machine here runs (127.0.0.1:5432, user postgres,
database `test`; override with CHEEMS_TEST_POSTGRES_URL). Each PostgreSQL test gets a fresh schema,
chosen through the URL's `options=-csearch_path=...` and dropped afterwards. An unreachable server
fails these tests; it never skips them. `browser`, `page`, `screenshot`: a real Chromium for page tests
(tests/web/browser.py; see tests/web/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from services.store.db import StoreConfig, create_engine_for
from services.store.migrate import upgrade
from tests.web.browser import browser, page, screenshot  # noqa: F401  (browser fixtures for every test folder)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample"


@pytest.fixture(scope="session", autouse=True)
def token_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Training runs' token cache (trainer.data.cache) in this session's temporary folder, not the user's
    ~/.cache: set in the environment, so the processes tests start (torchrun, `cheems up`) use it too."""
    folder = tmp_path_factory.mktemp("cache")
    before = os.environ.get("CHEEMS_CACHE_DIR")
    os.environ["CHEEMS_CACHE_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("CHEEMS_CACHE_DIR", None)
    else:
        os.environ["CHEEMS_CACHE_DIR"] = before


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """Commands run in this process (CliRunner) set logging up as a process does (services.observe.logs): the root
    logger's handlers and level, the exception hooks, the ids bound to the process and the log format of the
    environment are put back after each test, so no test logs through the handler another one installed."""
    import logging
    import threading

    from services.observe.logs import LOG_FORMAT_ENV, QUIET_BARS, bind

    root = logging.getLogger()
    handlers, level, hooks = root.handlers[:], root.level, (sys.excepthook, threading.excepthook)
    kept = {name: os.environ.get(name) for name in (LOG_FORMAT_ENV, *QUIET_BARS)}
    yield
    root.handlers[:], sys.excepthook, threading.excepthook = handlers, *hooks
    root.setLevel(level)
    bind(request_id=None, training_id=None, run_id=None)
    for name, value in kept.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a test marked `slow` (real processes: Triton, torchrun, the services) are collected first,
    those marked `slow("longest")` before the others; the sort is stable, so each group keeps its order.

    A run in one process goes in this order. `make test` hands whole files to its workers (`--dist loadfile`) and
    xdist sorts them by their number of tests, so there this order only breaks its ties (the Makefile says why
    it is left so). `-m "not slow"` gives a quick run of the rest.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    # the longest of them (`slow("longest")`: minutes of real processes, e.g. the chaos soak) first of all
    longest = {item.path for item in items if "longest" in getattr(item.get_closest_marker("slow"), "args", ())}
    items.sort(key=lambda item: (item.path not in longest, item.path not in slow))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`tiny_checkpoint(hidden_size=32, layers=2, seed=0, name="tiny")`: `init_tiny_model` into a folder `name`,
    made once per test session for each set of arguments and shared by every test folder and every xdist worker
    (the first to ask builds it under a file lock; a build costs seconds of CPU, `make test` asks on three workers).
    Treat it as read-only: copy it first to change it."""
    import fcntl

    from trainer.tiny import init_tiny_model

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: the workers' common root
    made: dict[tuple[int, int, int, str], Path] = {}

    def make(hidden_size: int = 32, layers: int = 2, seed: int = 0, name: str = "tiny") -> Path:
        key = (hidden_size, layers, seed, name)
        if key not in made:
            folder = shared / f"tiny-h{hidden_size}-l{layers}-s{seed}"
            folder.mkdir(exist_ok=True)
            with (folder / f"{name}.lock").open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not (folder / f"{name}.done").exists():
                    init_tiny_model(folder / name, hidden_size, layers, seed)
                    (folder / f"{name}.done").touch()
            made[key] = folder / name
        return made[key]

    return make


@pytest.fixture
def sample_paths() -> tuple[list[Path], Path]:
    """([open.jsonl, human.jsonl], rewards.jsonl) of the bundled sample."""
    return [SAMPLE / "open.jsonl", SAMPLE / "human.jsonl"], SAMPLE / "rewards.jsonl"


PG_URL = os.environ.get("CHEEMS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a SQLite file, or a fresh schema on the PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cheems.db'}"
    else:
        yield from _postgres_schema()


def _postgres_schema() -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    admin = create_engine(PG_URL, poolclass=NullPool, connect_args={"connect_timeout": 5})
    try:
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    except OperationalError as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL is not reachable at {PG_URL} (it runs on every dev and CI machine): {exc}")
    try:
        url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on a database migrated to the newest revision."""
    upgrade(db_url)
    engine = create_engine_for(StoreConfig(db_url))
    yield engine
    engine.dispose()  # before the schema is dropped: open connections would block DROP SCHEMA


@pytest.fixture
def account(engine: Engine) -> Callable[[str, str], str]:
    """account(name, role) -> a token of that account in `engine`'s store (tests/services/accounts.py)."""
    from tests.services.accounts import account as make

    return lambda name, role: make(engine, name, role)


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Callable[..., Path]) -> Any:
    """A Hugging Face cache (HF_HOME) filled by huggingface_hub itself from a local stand-in of the Hub
    (tests/cheems/hub/fake_hub.py): `org/tiny`, the tiny checkpoint (a pickle beside it, never fetched), and
    `org/bins`, a config and a pickle only (fetched file by file with `hf_hub_download`). Read-only."""
    from tests.cheems.hub.fake_hub import FakeHub, hub_environment, resolve_elsewhere

    source, home = tiny_checkpoint(), tmp_path_factory.mktemp("hf-home")
    with_pickle, bins = tmp_path_factory.mktemp("org-tiny"), tmp_path_factory.mktemp("org-bins")
    for file in source.iterdir():
        (with_pickle / file.name).symlink_to(file)
    for folder in (with_pickle, bins):
        (folder / "pytorch_model.bin").write_bytes(b"not a checkpoint: never fetched nor loaded")
    (bins / "config.json").write_text((source / "config.json").read_text())
    with FakeHub({"org/tiny": with_pickle, "org/bins": bins}) as hub:
        outcomes, progress = resolve_elsewhere(["org/tiny"], {"HF_ENDPOINT": hub.url, "HF_HOME": str(home)})
        fetch = "from huggingface_hub import hf_hub_download as get\nfor f in 'config.json', 'pytorch_model.bin': "
        fetch += "get('org/bins', f)"
        env = hub_environment({"HF_ENDPOINT": hub.url, "HF_HOME": str(home)})
        subprocess.run([sys.executable, "-c", fetch], env=env, check=True, capture_output=True, timeout=120)
    assert outcomes["org/tiny"][0] == "ok", outcomes
    return SimpleNamespace(
        home=home,
        cache=home / "hub",
        snapshot=Path(outcomes["org/tiny"][1]),
        source=source,
        commit=hub.commits["org/tiny"],
        downloads=hub.downloads,
        progress=progress,
    )


@pytest.fixture
def hub_offline(hub_cache: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`hub_cache` with HF_HUB_OFFLINE on, here (huggingface_hub's constants) and for processes started here."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache.cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(hub_cache.home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return hub_cache
