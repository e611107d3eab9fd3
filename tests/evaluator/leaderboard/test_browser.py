"""The leaderboard in a real Chromium (Playwright, Debian's chromium), after real evaluation runs (SQLite store).

The numbers the board shows equal the stored results; a running evaluation's progress moves by itself and
the board reloads itself when the run ends; a model's page shows the chart, the per-category table and the
run history; two models are compared through the form. Screenshots go to out/screenshots/leaderboard*.png.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evaluator.leaderboard.app import create_app
from evaluator.pipeline.runs import fail_run
from services.bus.broker import EmbeddedBroker
from services.store.db import StoreConfig, create_engine_for
from services.store.migrate import upgrade
from tests.evaluator.leaderboard.data import SCORED, Board, fill, score, stored_result
from tests.web.conftest import serve_asgi

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

Shot = Callable[[Any, str], Path]


@dataclass
class Served(Board):
    base: str = ""


@pytest.fixture(scope="module")
def board(
    tmp_path_factory: pytest.TempPathFactory,
    checkpoint: Path,
    broker: EmbeddedBroker,
    tiny_checkpoint: Callable[..., Path],
) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("board")
    other = tiny_checkpoint(hidden_size=32, seed=1)
    url = f"sqlite:///{tmp / 'board.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    try:
        filled = fill(engine, checkpoint, other, broker.bootstrap, tmp)
        with serve_asgi(create_app(engine)) as base:
            yield Served(**vars(filled), base=base)
    finally:
        engine.dispose()


def shown(page: Any, selector: str) -> list[dict[str, str]]:
    """Every number cell under `selector`: its field, its exact value and the text shown."""
    return page.eval_on_selector_all(
        f"{selector} td[data-field]",
        "cells => cells.map(c => ({field: c.dataset.field, value: c.dataset.value, text: c.textContent}))",
    )


def test_the_board_shows_the_stored_results_best_first(board: Served, page: Any, screenshot: Shot) -> None:
    page.goto(board.base + "/")
    rows = page.eval_on_selector_all("#leaderboard tbody tr", "rows => rows.map(r => r.dataset.model)")
    assert rows == [board.best, board.second, board.running, board.idle]
    for model in (board.best, board.second):
        stored = stored_result(board.engine, board.runs[model])
        expected = {"overall": stored["overall"]}
        for name, subset in stored["subsets"].items():
            expected |= {f"{name}.{m}": subset[m] for m in ("accuracy", "exact_match", "ece")}
        cells = {c["field"]: c for c in shown(page, f'tr[data-model="{model}"]')}
        for field, value in expected.items():
            assert float(cells[field]["value"]) == value, field
            assert cells[field]["text"] == f"{value:.4f}", field
    assert page.text_content(f'tr[data-model="{board.running}"] .progress-text') == f"{SCORED}/36"
    screenshot(page, "leaderboard")


def test_progress_moves_by_itself_and_the_board_reloads_when_the_run_ends(board: Served, page: Any) -> None:
    page.goto(board.base + "/")
    page.evaluate("window.stillHere = true")  # gone after a reload
    row = f'tr[data-model="{board.running}"]'
    score(board.engine, board.going, range(SCORED, 12))
    page.wait_for_function(f"() => document.querySelector('{row} .progress-text').textContent === '12/36'")
    assert page.evaluate(f"document.querySelector('{row} progress').value") == 12
    assert page.evaluate("window.stillHere") is True  # updated in place
    fail_run(board.engine, board.going, "stopped by the test")
    page.wait_for_selector(f'{row}[data-state="failed"]', timeout=15_000)
    assert page.evaluate("window.stillHere") is None
    assert page.text_content(f"{row} td.status").strip() == "失败"


def test_a_model_page_shows_its_chart_table_and_runs(board: Served, page: Any, screenshot: Shot) -> None:
    page.goto(board.base + "/")
    page.click(f'tr[data-model="{board.best}"] a')
    page.wait_for_url(f"**/models/{board.best}")
    page.wait_for_function("() => document.getElementById('chart').complete")
    assert page.evaluate("document.getElementById('chart').naturalWidth") > 300  # the SVG loaded and drew
    stored = stored_result(board.engine, board.runs[board.best])
    assert float(page.get_attribute("#overall", "data-value")) == stored["overall"]
    categories = page.eval_on_selector_all("#categories tbody tr", "rows => rows.map(r => r.dataset.category)")
    assert categories == sorted({c for s in stored["subsets"].values() for c in s["per_category"]})
    for category in categories:
        for cell in shown(page, f'#categories tr[data-category="{category}"]'):
            name, metric = cell["field"].split(".")
            figures = stored["subsets"][name]["per_category"].get(category)
            value = figures[metric] if figures else None
            assert (cell["value"] == "" and value is None) or float(cell["value"]) == value
    states = page.eval_on_selector_all("#runs tbody tr", "rows => rows.map(r => r.dataset.state)")
    assert states == ["failed", "succeeded"]
    screenshot(page, "leaderboard-model")


def test_two_models_compared_through_the_form(board: Served, page: Any, screenshot: Shot) -> None:
    page.goto(board.base + "/")
    page.select_option("#pick-a", board.second)
    page.select_option("#pick-b", board.best)
    page.click("#compare")
    page.wait_for_url(f"**/compare/{board.second}/{board.best}?lang=zh")
    a, b = (stored_result(board.engine, board.runs[m]) for m in (board.second, board.best))
    overall = {c["field"]: float(c["value"]) for c in shown(page, 'tr[data-row="overall"]')}
    assert overall == {"a": a["overall"], "b": b["overall"], "difference": a["overall"] - b["overall"]}
    assert page.locator("article.disagreement").count() >= 1
    first = page.locator("article.disagreement").first
    assert first.locator("table.responses tbody tr").count() >= 2
    screenshot(page, "leaderboard-compare")


def test_english_is_one_click_away_and_stays(board: Served, page: Any) -> None:
    page.goto(board.base + "/")
    assert page.text_content("header h1") == "奖励模型排行榜"
    page.click("a[data-lang=en]")
    assert page.text_content("header h1") == "Reward model leaderboard"
    page.goto(f"{board.base}/models/{board.best}")
    assert "Run history" in page.text_content("main")
