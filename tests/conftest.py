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
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a test marked `slow` (real processes: Triton, torchrun, the services) run first.

    `make test` hands whole files to its workers (`--dist loadfile`) in collection order; a long file handed
    out last keeps one worker busy while the others idle. Slow first, the run ends on short files. The sort is
    stable, so each group keeps its order. `-m "not slow"` gives a quick run of the rest.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`tiny_checkpoint(hidden_size=32, layers=2, seed=0, name="tiny")`: `init_tiny_model` into a folder `name`,
    made once per test session (per xdist worker) for each set of arguments and shared by every test folder.
    Treat it as read-only: copy it first to change it."""
    from trainer.tiny import init_tiny_model

    made: dict[tuple[int, int, int, str], Path] = {}

    def make(hidden_size: int = 32, layers: int = 2, seed: int = 0, name: str = "tiny") -> Path:
        key = (hidden_size, layers, seed, name)
        if key not in made:
            folder = tmp_path_factory.mktemp(f"tiny-h{hidden_size}-l{layers}-s{seed}")
            made[key] = init_tiny_model(folder / name, hidden_size, layers, seed)
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
