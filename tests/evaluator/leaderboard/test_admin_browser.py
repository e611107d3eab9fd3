"""The admin's buttons on the leaderboard, in a real Chromium over a real SQLite store: a wrong token is refused
with the API's words and changes nothing; an admin promotes a candidate from its page, a rejected model only with
"force", and rolls production back from the board; each step lands in the store under the admin's name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from evaluator.leaderboard.app import create_app
from services.store import lifecycle
from services.store.accounts import add_annotator
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import ModelTransition
from tests.web.conftest import serve_asgi

Shot = Callable[[Any, str], Path]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Engine, str, str]]:
    url = f"sqlite:///{tmp_path / 'admin.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    with session_scope(engine) as session:
        admin = add_annotator(session, "组长", admin=True)
        annotator = add_annotator(session, "张三")
        for model_id in ("rm-a", "rm-b", "rm-c"):
            lifecycle.register_checkpoint(session, f"/models/{model_id}", model_id, "person:ann")
        lifecycle.reject(session, "rm-c", "policy:auto", "Overall fell")
    try:
        with serve_asgi(create_app(engine)) as base:
            yield base, engine, admin, annotator
    finally:
        engine.dispose()


def production(engine: Engine) -> str | None:
    with session_scope(engine) as session:
        model = lifecycle.production(session)
        return model.id if model else None


def click(page: Any, token: str, reason: str = "") -> str:
    page.fill("#admin-token", token)
    page.fill("#admin-reason", reason)
    page.click("#admin-go")
    page.wait_for_function("() => document.getElementById('admin-message').textContent !== ''")
    return page.text_content("#admin-message")


def test_an_admin_promotes_and_rolls_back_from_the_pages(
    site: tuple[str, Engine, str, str], page: Any, screenshot: Shot
) -> None:
    base, engine, admin, annotator = site
    page.goto(base + "/models/rm-a?lang=en")
    assert click(page, "chm_nobody") == "no active account has this token"
    assert "needs the role admin; 张三 is annotator" in click(page, annotator)
    assert production(engine) is None

    with page.expect_navigation():  # the page reloads itself after a change
        assert click(page, admin, "checked by hand").startswith("rm-a: candidate → production")
    assert production(engine) == "rm-a"
    assert page.get_attribute('#model [data-field="state"]', "data-value") == "production"
    assert page.is_disabled("#admin-go")  # already production
    assert page.input_value("#admin-token") == admin  # kept for this tab

    page.goto(base + "/models/rm-c?lang=en")  # rejected: refused until "force" is ticked
    assert "rejected" in click(page, admin)
    assert production(engine) == "rm-a"
    page.check("#admin-force")
    with page.expect_navigation():
        click(page, admin, "overrule the gate")
    assert production(engine) == "rm-c"
    screenshot(page, "leaderboard-admin-promote")

    page.goto(base + "/?lang=en")
    with page.expect_navigation():
        assert click(page, admin, "bad rewards").startswith("rm-c: production → ")
    assert production(engine) == "rm-a"
    screenshot(page, "leaderboard-admin-rollback")
    with session_scope(engine) as session:
        steps = session.execute(select(ModelTransition.model_id, ModelTransition.actor, ModelTransition.reason)).all()
    by_admin = [tuple(s) for s in steps if s.actor == "person:组长"]
    assert ("rm-a", "person:组长", "checked by hand") in by_admin
    assert ("rm-c", "person:组长", "overrule the gate") in by_admin
    assert ("rm-a", "person:组长", "bad rewards") in by_admin  # the rollback: rm-a back in production


def test_no_admin_card_where_there_is_nothing_to_do(site: tuple[str, Engine, str, str], page: Any) -> None:
    base = site[0]
    page.goto(base + "/")
    assert page.query_selector("#admin") is None  # no production model: nothing to roll back
    page.goto(base + "/models/rm-nobody")
    assert page.query_selector("#admin") is None  # not in the registry
    page.goto(base + "/models/rm-b")
    assert page.query_selector("#admin-force") is None  # a candidate needs no force
