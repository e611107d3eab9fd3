"""The leaderboard over HTTP (a real uvicorn) on a real store, SQLite and PostgreSQL, holding results made through
the real evaluation path: two registered models evaluated through Kafka, the score worker and a tiny scorer.

The board lists them best first with exactly the stored figures, then a model whose run is going (its
progress) and one never evaluated; a model's JSON and page hold its result, chart and run history; the
comparison's differences and disagreements are recomputed here from the stored results and scores. Bad
input gets a 4xx with a message naming it, as JSON under /api and as a page elsewhere.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from cheems.formats.cheemsbench import read_bench
from evaluator.leaderboard.app import create_app
from services.bus.broker import EmbeddedBroker
from services.observe.metrics import new_registry
from services.store import lifecycle
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from tests.conftest import _postgres_schema
from tests.evaluator.leaderboard.data import BENCH, SCORED, Board, fill, stored_result, stored_scores
from tests.services.observe.scrape import parse, promtool_problems, sample_value
from tests.web.conftest import serve_asgi

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


@dataclass
class Served(Board):
    base: str = ""  # the app's URL


@pytest.fixture(scope="module")
def other_checkpoint(tiny_checkpoint: Callable[..., Path]) -> Path:
    return tiny_checkpoint(hidden_size=32, seed=1)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def board(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    checkpoint: Path,
    other_checkpoint: Path,
    broker: EmbeddedBroker,
) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("board")
    schema = _postgres_schema() if request.param == "postgresql" else None
    url = next(schema) if schema is not None else f"sqlite:///{tmp / 'board.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    try:
        filled = fill(engine, checkpoint, other_checkpoint, broker.bootstrap, tmp)
        with serve_asgi(create_app(engine, registry=new_registry())) as base:
            yield Served(**vars(filled), base=base)
    finally:
        engine.dispose()
        if schema is not None:
            next(schema, None)


def get(url: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET, 4xx and 5xx included."""
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.headers["content-type"], reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["content-type"], e.read().decode()


def get_json(url: str) -> dict:
    status, kind, body = get(url)
    assert status == 200 and kind == "application/json", (status, body[:500])
    return json.loads(body)


def test_the_board_lists_every_model_best_first_with_the_stored_figures(board: Served) -> None:
    data = get_json(f"{board.base}/api/leaderboard")
    models = [row["model_id"] for row in data["models"]]
    assert models == [board.best, board.second, board.running, board.idle]
    assert data["subsets"] == ["open", "human"]
    for rank, row in enumerate(data["models"][:2], 1):
        stored = stored_result(board.engine, board.runs[row["model_id"]])
        assert row["rank"] == rank and row["overall"] == stored["overall"]
        assert row["evaluated_run"] == board.runs[row["model_id"]] and row["dataset_recipe"] == "human-debias"
        for name, figures in row["subsets"].items():
            kept = stored["subsets"][name]
            assert figures == {k: kept[k] for k in ("accuracy", "exact_match", "ece", "prompts", "pairs")}
    best = data["models"][0]
    assert best["latest_run"]["state"] == "failed" and "open.jsonl moved" in best["latest_run"]["error"]
    going = data["models"][2]
    assert going["rank"] is None and going["overall"] is None
    assert (going["latest_run"]["state"], going["latest_run"]["items_scored"], going["latest_run"]["items_total"]) == (
        "running", SCORED, 36)  # fmt: skip
    assert data["models"][3]["latest_run"] is None


def cell(row_html: str, field: str) -> tuple[str, str]:
    """(data-value, shown text) of the row's cell for `field`."""
    found = re.search(rf'data-field="{re.escape(field)}" data-value="([^"]*)">([^<]*)<', row_html)
    assert found, f"no {field} cell in {row_html[:300]}"
    return found.group(1), found.group(2)


def test_the_board_page_shows_the_stored_figures_and_the_progress(board: Served) -> None:
    status, kind, page = get(f"{board.base}/")
    assert status == 200 and kind.startswith("text/html")
    assert "奖励模型排行榜" in page and "/static/leaderboard/leaderboard.js" in page
    rows = dict(re.findall(r'<tr data-model="([^"]+)"(.*?)</tr>', page))
    stored = stored_result(board.engine, board.runs[board.best])
    value, shown = cell(rows[board.best], "overall")
    assert float(value) == stored["overall"] and shown == f"{stored['overall']:.4f}"
    value, shown = cell(rows[board.best], "human.exact_match")
    assert float(value) == stored["subsets"]["human"]["exact_match"]
    assert '<progress value="5" max="36">' in rows[board.running] and "5/36" in rows[board.running]
    english = get(f"{board.base}/?lang=en")[2]
    assert "Reward model leaderboard" in english and "not evaluated" in english


def test_a_model_as_json_and_as_a_page_with_its_chart_and_history(board: Served) -> None:
    data = get_json(f"{board.base}/api/models/{board.best}")
    assert data["result"] == stored_result(board.engine, board.runs[board.best])
    assert data["rank"] == 1 and [r["state"] for r in data["runs"]] == ["failed", "succeeded"]
    assert data["runs"][1]["run_id"] == board.runs[board.best] and data["runs"][1]["items_scored"] == 36
    status, _, page = get(f"{board.base}/models/{board.best}")
    assert status == 200 and f'src="/models/{board.best}/chart.svg"' in page
    assert data["dataset"]["recipe"] == "human-debias" and data["dataset"]["pairs"] == 150
    assert data["dataset"]["details"] is None  # stored without a build record: the page says so
    assert 'id="dataset-pairs">150<' in page and "没有各步骤的记录" in page
    tracking = data["tracking"]  # where its training was reported, as the store keeps it
    assert set(tracking) == {"tensorboard", "mlflow"} and tracking["mlflow"].startswith("mlflow-")
    assert f'id="tracking-mlflow">{tracking["mlflow"]}</code>' in page and "训练记录" in page
    assert get_json(f"{board.base}/api/leaderboard")["models"][0]["tracking"] == tracking
    categories = {c for s in data["result"]["subsets"].values() for c in s["per_category"]}
    assert all(f'data-category="{c}"' in page for c in categories)
    status, kind, svg = get(f"{board.base}/models/{board.best}/chart.svg")
    assert status == 200 and kind == "image/svg+xml"
    root = ET.fromstring(svg)  # well-formed; a panel per subset
    panels = root.findall(".//{http://www.w3.org/2000/svg}g[@class='panel']")
    assert [p.get("data-subset") for p in panels] == ["open", "human"]
    assert all(c in svg for c in categories)
    idle = get_json(f"{board.base}/api/models/{board.idle}")
    assert idle["result"] is None and idle["runs"] == [] and idle["registered"] is True


def agreement(ranks: list[int], a: list[float], b: list[float]) -> tuple[int, int, int, int]:
    """(comparisons, disagreements, a right, b right), counted here independently of the app."""
    pairs = [
        (i, j) if ranks[i] < ranks[j] else (j, i) for i, j in combinations(range(len(ranks)), 2) if ranks[i] != ranks[j]
    ]
    right_a = [a[x] > a[y] for x, y in pairs]
    right_b = [b[x] > b[y] for x, y in pairs]
    return len(pairs), sum(p != q for p, q in zip(right_a, right_b, strict=True)), sum(right_a), sum(right_b)


def test_two_models_side_by_side(board: Served) -> None:
    a, b = board.best, board.second
    data = get_json(f"{board.base}/api/compare/{a}/{b}?limit=100")
    ra, rb = stored_result(board.engine, board.runs[a]), stored_result(board.engine, board.runs[b])
    assert data["overall_difference"] == ra["overall"] - rb["overall"] and data["note"] is None
    for row in data["per_category"]:
        ca = ra["subsets"][row["subset"]]["per_category"][row["category"]]
        cb = rb["subsets"][row["subset"]]["per_category"][row["category"]]
        assert row["exact_match_difference"] == ca["exact_match"] - cb["exact_match"]
        if ca["accuracy"] is not None and cb["accuracy"] is not None:
            assert row["accuracy_difference"] == ca["accuracy"] - cb["accuracy"]
    scores_a, scores_b = stored_scores(board.engine, board.runs[a]), stored_scores(board.engine, board.runs[b])
    bench = {Path(p).stem: read_bench(p) for p in BENCH}
    expected = []
    for item, rewards in scores_a.items():
        subset, index = item.split(":")
        record = bench[subset][int(index)]
        ids = [r.id for r in record.responses]
        counts = agreement(record.ranks(), [rewards[i] for i in ids], [scores_b[item][i] for i in ids])
        if counts[1]:
            expected.append((item, counts))
    assert expected, "two differently seeded models should disagree somewhere"
    assert sorted((d["item"], (d["comparisons"], d["disagreements"], d["a_right"], d["b_right"]))
                  for d in data["disagreements"]) == sorted(expected)  # fmt: skip
    shares = [d["disagreements"] / d["comparisons"] for d in data["disagreements"]]
    assert shares == sorted(shares, reverse=True)
    top = data["disagreements"][0]
    record = bench[top["subset"]][int(top["item"].split(":")[1])]
    assert top["prompt"] == record.input
    shown = {r["id"]: (r["content"], r["a_score"], r["b_score"]) for r in top["responses"]}
    kept_a, kept_b = scores_a[top["item"]], scores_b[top["item"]]
    assert shown == {r.id: (r.content, kept_a[r.id], kept_b[r.id]) for r in record.responses}
    assert len(get_json(f"{board.base}/api/compare/{a}/{b}")["disagreements"]) == min(10, len(expected))
    status, _, page = get(f"{board.base}/compare/{a}/{b}?limit=3")
    assert status == 200 and page.count('class="card disagreement"') == min(3, len(expected))
    assert f'data-item="{top["item"]}"' in page


def test_the_comparison_says_why_prompts_are_missing_when_a_bench_file_is_gone(board: Served) -> None:
    moved = board.copies.with_name("moved")
    board.copies.rename(moved)
    try:
        data = get_json(f"{board.base}/api/compare/{board.best}/{board.second}")
    finally:
        moved.rename(board.copies)
    assert data["disagreements"] == [] and "cannot be read" in data["note"] and data["per_category"]


@pytest.mark.parametrize(
    ("path", "status", "reason", "says"),
    [
        ("/api/models/rm-nobody", 404, "not_found", "no model 'rm-nobody'"),
        ("/api/models/" + "x" * 201, 400, "invalid_request", "model_id: longer than 200"),
        ("/api/models/rm-%00", 400, "invalid_request", "model_id: control characters"),
        ("/models/rm-nobody/chart.svg", 404, "not_found", "rm-nobody"),
        ("/api/compare/{best}/rm-nobody", 404, "not_found", "rm-nobody"),
        ("/api/compare/{best}/{best}", 400, "invalid_request", "b: choose a model other than a"),
        ("/api/compare/{best}/{second}?limit=abc", 400, "invalid_request", "limit: expected a whole number"),
        ("/api/compare/{best}/{second}?limit=0", 400, "invalid_request", "limit"),
        ("/api/compare/{best}/{second}?limit=101", 400, "invalid_request", "limit"),
        ("/api/compare/{best}/{idle}", 409, "not_evaluated", "no finished evaluation"),
        ("/models/{idle}/chart.svg", 409, "not_evaluated", "no chart"),
        ("/api/nothing-here", 404, "not_found", "no page at /api/nothing-here"),
    ],
)
def test_bad_input_gets_a_json_4xx_naming_it(board: Served, path: str, status: int, reason: str, says: str) -> None:
    url = board.base + path.format(best=board.best, second=board.second, idle=board.idle)
    got, kind, body = get(url)
    assert (got, kind) == (status, "application/json"), body[:300]
    error = json.loads(body)
    assert error["reason"] == reason and says in error["error"]


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/models/rm-nobody", 404, "no model &#x27;rm-nobody&#x27;"),
        ("/compare/{best}/{idle}", 409, "no finished evaluation"),
        ("/compare?a={best}", 400, "b: name a model"),
        ("/compare/{best}/{second}?limit=-1", 400, "limit"),
        ("/nothing-here", 404, "no page at /nothing-here"),
        ("/models/%3Cscript%3Ealert(1)%3C%2Fscript%3E", 404, "&lt;script&gt;"),
    ],
)
def test_bad_input_gets_a_page_saying_what_is_wrong(board: Served, path: str, status: int, says: str) -> None:
    url = board.base + path.format(best=board.best, second=board.second, idle=board.idle)
    got, kind, body = get(url)
    assert got == status and kind.startswith("text/html") and 'id="error"' in body and says in body
    assert "<script>alert" not in body


def test_the_compare_form_redirects_and_other_methods_are_refused(board: Served) -> None:
    request = urllib.request.Request(f"{board.base}/compare?a={board.best}&b={board.second}&lang=en")
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(request, timeout=30)
    assert redirect.value.code == 303
    assert redirect.value.headers["location"] == f"/compare/{board.best}/{board.second}?lang=en"
    post = urllib.request.Request(f"{board.base}/api/leaderboard", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=30)
    assert refused.value.code == 405 and json.loads(refused.value.read())["reason"] == "http_error"
    assert get_json(f"{board.base}/health") == {"status": "serving"}
    assert "/api/leaderboard" in get_json(f"{board.base}/api")["endpoints"]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_a_store_that_does_not_answer_is_a_503_not_a_500() -> None:
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 2})
    try:
        with serve_asgi(create_app(engine)) as base:
            for path in ("/api/leaderboard", "/health"):
                status, kind, body = get(base + path)
                assert (status, kind, json.loads(body)["reason"]) == (503, "application/json", "unavailable")
            status, kind, body = get(base + "/")
            assert status == 503 and kind.startswith("text/html") and "the store does not answer" in body
    finally:
        engine.dispose()


def test_states_and_the_production_badge(board: Served) -> None:
    """Runs last in its module: it promotes the best model of the board's store."""
    data = get_json(f"{board.base}/api/leaderboard")
    assert {row["state"] for row in data["models"] if row["registered"]} == {"candidate"}
    with session_scope(board.engine) as session:
        lifecycle.promote(session, board.best, "person:ann")
    rows = {row["model_id"]: row for row in get_json(f"{board.base}/api/leaderboard")["models"]}
    assert (rows[board.best]["state"], rows[board.best]["aliases"]) == ("production", ["production"])
    assert (rows[board.second]["state"], rows[board.second]["aliases"]) == ("candidate", [])
    status, _, page = get(f"{board.base}/?lang=en")
    assert status == 200
    badge = re.search(r'data-model="([^"]+)".*?class="badge production" data-field="state"', page, re.S)
    assert badge is not None and badge.group(1) == board.best and page.count("badge production") == 1
    status, _, model_page = get(f"{board.base}/models/{board.best}")
    assert status == 200 and 'class="badge production"' in model_page and "生产中" in model_page


def test_http_requests_are_counted_by_route_on_its_metrics(board: Served) -> None:
    before = parse(get(board.base + "/metrics")[2])
    calls = [(f"/api/models/{board.best}", 200), (f"/models/{board.second}", 200), ("/api/models/rm-nobody", 404),
             ("/no/such/page", 404)]  # fmt: skip
    for path, status in calls:
        assert get(board.base + path)[0] == status, path
    text = get(board.base + "/metrics")[2]
    after = parse(text)
    for path, status in [("/api/models/{model_id}", 200), ("/models/{model_id}", 200),
                         ("/api/models/{model_id}", 404), ("<unmatched>", 404)]:  # fmt: skip
        labels = {"method": "GET", "path": path, "status": str(status)}
        delta = sample_value(after, "http_requests_total", labels) - sample_value(before, "http_requests_total", labels)
        assert delta == 1, labels
    labelled = {s.labels["path"] for f in after.values() for s in f.samples if s.name == "http_requests_total"}
    assert not labelled & {"/metrics", "/no/such/page", f"/api/models/{board.best}"}  # templates only
    assert promtool_problems(text) == ""
