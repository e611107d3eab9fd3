"""The annotator page's HTTP API on the real store (SQLite and PostgreSQL) behind a real uvicorn: sign in, the
next task, submit (stored once, through the gRPC path), the admin overview, and a clear 4xx for every bad input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

from services.annotation.algorithm.doubles import DoublingConfig
from services.annotation.config import QueueConfig, TaskConfig
from services.annotation.service import AnnotationService
from services.annotation.web.app import create_app
from services.annotation.web.workbench import Workbench
from services.observe.metrics import new_registry
from services.store.db import session_scope
from services.store.models import Annotation, Annotator, Ranking
from tests.services.accounts import give
from tests.services.annotation.web.pages_data import Clock, add_people, add_prompt, call
from tests.services.observe.scrape import parse, promtool_problems, sample_value
from tests.web.conftest import serve_asgi
from tests.web.headers import assert_secure, fetch, inline_code


@pytest.fixture
def site(engine: Engine) -> Iterator[tuple[str, AnnotationService, Clock]]:
    """(base URL, the service behind it, its clock) of an annotation web app on a fresh store."""
    service, clock = AnnotationService(engine, queue=QueueConfig(lease_seconds=60)), Clock()
    bench = Workbench(service, clock)
    with serve_asgi(create_app(bench, new_registry())) as base:
        yield base, service, clock


def annotations(service: AnnotationService) -> int:
    with session_scope(service.engine) as session:
        return int(session.scalar(select(func.count()).select_from(Annotation)) or 0)


def test_an_annotator_gets_a_task_submits_it_once_and_the_prompt_is_ranked(site: Any) -> None:
    base, service, _ = site
    prompt_id = add_prompt(service, "快速排序的复杂度？", system_prompt="你是算法老师。", history=[("user", "你好")])
    tokens = add_people(service, "张三")
    assert call(base, "GET", "/api/me", tokens["张三"]) == (200, {"name": "张三", "admin": False})
    status, got = call(base, "GET", "/api/tasks/next", tokens["张三"])
    task = got["task"]
    assert status == 200 and task["prompt_id"] == prompt_id and task["system_prompt"] == "你是算法老师。"
    assert [r["label"] for r in task["responses"]] == ["A", "B", "C"]
    assert task["history"][0]["role"] == "user" and task["history"][0]["content"] == "你好"
    assert '<span class="math">$O(n \\log n)$</span>' in task["responses"][0]["html"]
    assert '<pre><code class="language-python">' in task["responses"][0]["html"]
    assert call(base, "GET", "/api/tasks/next", tokens["张三"])[1]["task"]["task_id"] == task["task_id"]  # still theirs

    body = {"annotation_id": "web-1", "order": [["r2"], ["r1"]], "discarded": ["r3"]}
    path = f"/api/tasks/{task['task_id']}/annotation"
    assert call(base, "POST", path, tokens["张三"], body) == (200, {"created": True, "message": "submitted"})
    status, again = call(base, "POST", path, tokens["张三"], body)  # a double submit
    assert status == 200 and again["created"] is False and "already submitted" in again["message"]
    assert annotations(service) == 1
    with session_scope(service.engine) as session:
        stored = session.scalars(select(Annotation)).one()
        assert (stored.annotator, stored.kind, stored.result, stored.discarded) == (
            "张三", "human", {"order": [["r2"], ["r1"]]}, ["r3"]
        )  # fmt: skip
        ranking = session.get(Ranking, prompt_id)
        assert ranking is not None and ranking.rank["r2"] < ranking.rank["r1"]
    assert call(base, "GET", "/api/tasks/next", tokens["张三"]) == (200, {"task": None, "withheld": 0})


def test_tasks_are_given_to_one_annotator_and_a_stale_or_completed_task_is_refused(site: Any) -> None:
    base, service, clock = site
    add_prompt(service, "第一题")
    tokens = add_people(service, "甲", "乙")
    first = call(base, "GET", "/api/tasks/next", tokens["甲"])[1]["task"]
    assert call(base, "GET", "/api/tasks/next", tokens["乙"]) == (200, {"task": None, "withheld": 0})  # 甲's
    path = f"/api/tasks/{first['task_id']}/annotation"
    body = {"annotation_id": "b-1", "order": [["r1", "r2", "r3"]]}
    status, error = call(base, "POST", path, tokens["乙"], body)
    assert (status, error["reason"]) == (403, "forbidden")

    clock.advance(61)  # 甲's lease runs out: the task may go to 乙
    assert call(base, "GET", "/api/tasks/next", tokens["乙"])[1]["task"]["task_id"] == first["task_id"]
    status, error = call(base, "POST", path, tokens["甲"], {"annotation_id": "a-1", "order": [["r1"], ["r2", "r3"]]})
    assert (status, error["reason"]) == (409, "stale_task") and "another annotator" in error["error"]
    assert call(base, "POST", path, tokens["乙"], body)[0] == 200
    status, error = call(base, "POST", path, tokens["甲"], {"annotation_id": "a-2", "order": [["r1"], ["r2", "r3"]]})
    assert (status, error["reason"]) == (409, "task_completed")
    status, error = call(base, "POST", path, tokens["乙"], {"annotation_id": "b-2", "order": [["r1"], ["r2", "r3"]]})
    assert (status, error["reason"]) == (409, "task_completed") and "you" in error["error"]  # a second tab
    assert annotations(service) == 1


def test_a_task_reassigned_and_completed_over_grpc_meanwhile_is_refused(site: Any) -> None:
    base, service, _ = site
    prompt_id = add_prompt(service, "第二题")
    tokens = add_people(service, "甲", "乙")
    task = call(base, "GET", "/api/tasks/next", tokens["甲"])[1]["task"]
    assert service.reassign(task["task_id"], "乙", "person:ops", "甲 is away") == "甲"
    service.submit("grpc-1", prompt_id, "乙", "human", {"order": [["r1"], ["r2"], ["r3"]]}, [], task["task_id"])
    body = {"annotation_id": "a-1", "order": [["r3"], ["r2"], ["r1"]]}
    status, error = call(base, "POST", f"/api/tasks/{task['task_id']}/annotation", tokens["甲"], body)
    assert (status, error["reason"]) == (409, "task_completed") and "another annotator" in error["error"]
    assert annotations(service) == 1


def test_wrong_tokens_and_non_admins_are_refused(site: Any) -> None:
    base, service, _ = site
    tokens = add_people(service, "甲", admin="组长")
    for path in ("/api/me", "/api/tasks/next", "/api/overview"):
        for token in (None, "chm_wrong", ""):
            status, error = call(base, "GET", path, token)
            assert (status, error["reason"]) == (401, "unauthenticated"), (path, token)
    status, error = call(base, "GET", "/api/overview", tokens["甲"])
    assert (status, error["reason"]) == (403, "forbidden")
    assert call(base, "GET", "/api/overview", tokens["组长"])[0] == 200
    with session_scope(service.engine) as session:  # only the hash is stored
        stored = {p.name: p.token_sha256 for p in session.scalars(select(Annotator))}
    assert tokens["甲"] not in stored.values() and len(stored["甲"]) == 64


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)  # refused before any SQL: one backend is enough
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not JSON"),
        (b'["r1"]', "JSON object"),
        (b'{"annotation_id": "x", "order": [["r1"], ["r2"]]}', "'r3' is neither ranked nor discarded"),
        (b'{"annotation_id": "x", "order": [["r1"], ["r2"], ["r9"]]}', "'r9' is not a response of this task"),
        (b'{"annotation_id": "x", "order": [["r1"], ["r1", "r2", "r3"]]}', "named twice"),
        (b'{"annotation_id": "x", "order": [["r1", "r2"]], "discarded": ["r2", "r3"]}', "named twice"),
        (b'{"annotation_id": "", "order": [["r1", "r2", "r3"]]}', "annotation_id"),
        (b'{"annotation_id": "x", "order": [[]], "discarded": ["r1", "r2", "r3"]}', "may not be empty"),
        (b'{"annotation_id": "x", "order": "r1>r2"}', "order: expected a list"),
        (b'{"annotation_id": "x", "order": [["r1", 2, "r3"]]}', "order[0]"),
        (b'{"annotation_id": "x", "ordre": []}', "ordre: unknown field"),
        (b'{"annotation_id": "x", "order": [["r1\\u0000"]]}', "not a response"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 5000, "not JSON"),  # deeper than Python's recursion limit
        (b'{"annotation_id": "' + b"x" * 70_000 + b'"}', "over 65536 bytes"),
    ],
)
def test_malformed_submits_are_400_and_store_nothing(site: Any, raw: bytes, message: str) -> None:
    base, service, _ = site
    add_prompt(service, "第三题")
    token = add_people(service, "甲")["甲"]
    task = call(base, "GET", "/api/tasks/next", token)[1]["task"]
    status, error = call(base, "POST", f"/api/tasks/{task['task_id']}/annotation", token, raw=raw)
    assert status == 400 and error["reason"] == "invalid_request" and message in error["error"], error
    assert annotations(service) == 0


def test_bad_ids_and_paths_are_4xx(site: Any) -> None:
    base, service, _ = site
    token = add_people(service, "甲")["甲"]
    body = {"annotation_id": "x", "order": [["r1"]]}
    status, error = call(base, "POST", "/api/tasks/not-a-task/annotation", token, body)
    assert status == 400 and "malformed" in error["error"]
    status, error = call(base, "POST", "/api/tasks/" + "0" * 64 + "/annotation", token, body)
    assert (status, error["reason"]) == (404, "unknown_task")
    assert call(base, "GET", "/api/nothing", token)[0] == 404
    assert call(base, "POST", "/api/tasks/next", token, raw=b"{}")[0] == 405  # a POST to a GET route
    assert call(base, "POST", "/api/tasks/" + "0" * 64 + "/annotation", None, body)[0] == 401  # token first


def test_the_overview_counts_done_and_open_work_agreement_and_cycles(site: Any) -> None:
    base, service, _ = site
    tokens = add_people(service, "细心", "马虎", admin="组长")
    four = [("r1", "一"), ("r2", "二"), ("r3", "三"), ("r4", "四")]  # four responses: four triples
    prompt_id = add_prompt(service, "第四题", four)
    careless = call(base, "GET", "/api/tasks/next", tokens["马虎"])[1]["task"]["task_id"]
    for task in service.open_tasks(prompt_id):  # 细心 follows r1 > r2 > r3 > r4; 马虎 swaps two neighbours
        name, keys = "马虎" if task.task_id == careless else "细心", sorted(task.contents)
        if name == "马虎":  # e.g. r1 > r2 > r4 -> r2 > r1 > r4: one cycle, of r1 and r2 only
            neighbours = int(keys[2][1]) - int(keys[1][1]) == 1
            keys = [keys[0], keys[2], keys[1]] if neighbours else [keys[1], keys[0], keys[2]]
        body = {"annotation_id": f"{name}-{task.task_id[:8]}", "order": [[k] for k in keys]}
        if name == "马虎":  # the triple the page gave them
            assert call(base, "POST", f"/api/tasks/{task.task_id}/annotation", tokens[name], body)[0] == 200
        else:  # the page gives one person one triple of a prompt: 细心's three come over the gRPC path
            give(service.engine, name, task.task_id)
            service.submit(body["annotation_id"], prompt_id, name, "human", {"order": body["order"]}, [], task.task_id)
    add_prompt(service, "第五题")
    call(base, "GET", "/api/tasks/next", tokens["马虎"])  # now holds one open task
    status, view = call(base, "GET", "/api/overview", tokens["组长"])
    assert status == 200 and (view["open_tasks"], view["free_tasks"]) == (1, 0)
    rows = {row["name"]: row for row in view["annotators"]}
    assert set(rows) == {"细心", "马虎", "组长"}
    assert [rows[n]["done"] for n in ("细心", "马虎", "组长")] == [3, 1, 0]
    assert [rows[n]["open"] for n in ("细心", "马虎", "组长")] == [0, 1, 0]
    assert rows["组长"]["agreement"] is None and rows["组长"]["admin"] is True
    # the swapped pair is on a cycle with 细心's one annotation of it; the ranking ties the two
    assert (rows["细心"]["agreeing"], rows["细心"]["compared"], rows["马虎"]["agreeing"]) == (8, 9, 2)
    assert rows["细心"]["agreement"] == pytest.approx(8 / 9) and rows["马虎"]["agreement"] == pytest.approx(2 / 3)
    assert rows["细心"]["cycle_share"] == pytest.approx(1 / 3) and rows["马虎"]["cycle_share"] == 1.0


def test_the_overview_shows_who_holds_what_and_the_prompts_the_accounts_cannot_finish(site: Any) -> None:
    base, service, clock = site
    tokens = add_people(service, "甲", "乙", admin="组长")  # three accounts annotate (an admin may)
    add_prompt(service, "四个回答", [("r1", "一"), ("r2", "二"), ("r3", "三"), ("r4", "四")])  # four triples
    call(base, "GET", "/api/tasks/next", tokens["甲"])
    clock.advance(30)
    call(base, "GET", "/api/tasks/next", tokens["乙"])
    clock.advance(31)  # 甲's is past the lease: idle, anyone's to take, still 甲's until then
    view = call(base, "GET", "/api/overview", tokens["组长"])[1]
    rows = {row["name"]: row for row in view["annotators"]}
    assert [(rows[n]["open"], rows[n]["idle"], rows[n]["oldest_seconds"]) for n in ("甲", "乙", "组长")] == [
        (1, 1, 61), (1, 0, 31), (0, 0, None)
    ]  # fmt: skip
    assert view["unfinishable"] == {"prompts": 1, "needed": 4, "accounts": 3, "people_per_prompt": 0}
    assert (view["open_tasks"], view["free_tasks"]) == (4, 3)  # two free, and 甲's idle one


def test_a_prompts_triples_go_to_different_annotators_on_the_page(site: Any) -> None:
    base, service, clock = site
    four = [("r1", "一"), ("r2", "二"), ("r3", "三"), ("r4", "四")]  # four triples
    add_prompt(service, "第六题", four)
    tokens = add_people(service, "甲", "乙", "丙", "丁", "戊")
    first = call(base, "GET", "/api/tasks/next", tokens["甲"])[1]["task"]
    assert call(base, "GET", "/api/tasks/next", tokens["甲"])[1]["task"]["task_id"] == first["task_id"]  # theirs
    body = {"annotation_id": "jia-1", "order": [[r["id"]] for r in first["responses"]]}
    assert call(base, "POST", f"/api/tasks/{first['task_id']}/annotation", tokens["甲"], body)[0] == 200
    assert call(base, "GET", "/api/tasks/next", tokens["甲"]) == (200, {"task": None, "withheld": 3})
    given = {call(base, "GET", "/api/tasks/next", tokens[n])[1]["task"]["task_id"] for n in ("乙", "丙", "丁")}
    assert len(given) == 3 and first["task_id"] not in given  # one triple each
    assert call(base, "GET", "/api/tasks/next", tokens["戊"]) == (200, {"task": None, "withheld": 0})  # all held
    assert call(base, "GET", "/api/tasks/next", tokens["甲"]) == (200, {"task": None, "withheld": 0})
    clock.advance(61)  # the leases run out: free again, but still not for 甲; 戊 takes one
    assert call(base, "GET", "/api/tasks/next", tokens["甲"]) == (200, {"task": None, "withheld": 3})
    assert call(base, "GET", "/api/tasks/next", tokens["戊"])[1]["task"]["task_id"] in given
    added = add_prompt(service, "第七题")  # a prompt 甲 has not annotated: theirs to take
    assert call(base, "GET", "/api/tasks/next", tokens["甲"])[1]["task"]["prompt_id"] == added


def test_the_overview_lists_what_the_rule_filter_kept_out(site: Any) -> None:
    base, service, _ = site
    tokens = add_people(service, "甲", admin="组长")
    garbled = "Sorry, this answer drifted into English and stayed there for the whole reply. " * 2
    add_prompt(service, "第六题", [("r1", "一"), ("r2", garbled), ("r3", "三"), ("r4", "四")])
    status, view = call(base, "GET", "/api/overview", tokens["组长"])
    assert status == 200 and view["rule_filtered"]["counts"] == {"non_chinese<0.3": 1}
    [row] = view["rule_filtered"]["newest"]
    assert (row["response"], row["reason"]) == ("r2", "non_chinese<0.3")
    assert row["excerpt"] == garbled[:120] + "…"
    assert call(base, "GET", "/api/overview", tokens["甲"])[0] == 403  # admins only, as the rest of it
    task = call(base, "GET", "/api/tasks/next", tokens["甲"])[1]["task"]
    assert "r2" not in {r["id"] for r in task["responses"]}  # never shown to an annotator


def test_doubled_triples_go_to_two_annotators_and_their_agreement_is_on_the_overview(engine: Engine) -> None:
    doubling, lease = TaskConfig(doubling=DoublingConfig(share=1.0)), QueueConfig(lease_seconds=60)
    service, clock = AnnotationService(engine, tasks=doubling, queue=lease), Clock()
    with serve_asgi(create_app(Workbench(service, clock))) as base:
        tokens = add_people(service, "甲", "乙", "丙", admin="组长")
        prompt_id = add_prompt(service, "第八题")  # one triple, and its copy
        assert len(service.open_tasks(prompt_id)) == 2
        view = call(base, "GET", "/api/overview", tokens["组长"])[1]["doubles"]
        assert view == {"triples": 0, "compared": 0, "agreeing": 0, "agreement": None, "target": 0.9, "pairs": []}
        orders = {"甲": [["r1"], ["r2"], ["r3"]], "乙": [["r2"], ["r1"], ["r3"]]}  # they differ on r1 vs r2
        for name, order in orders.items():
            task = call(base, "GET", "/api/tasks/next", tokens[name])[1]["task"]
            body = {"annotation_id": f"{name}-1", "order": order}
            assert call(base, "POST", f"/api/tasks/{task['task_id']}/annotation", tokens[name], body)[0] == 200
            assert call(base, "GET", "/api/tasks/next", tokens[name])[1]["task"] is None  # no third triple
        assert service.ranking(prompt_id) is not None  # both copies done: resolved
        add_prompt(service, "第九题")
        call(base, "GET", "/api/tasks/next", tokens["丙"])  # holds one copy: not counted yet
        status, view = call(base, "GET", "/api/overview", tokens["组长"])
    figures = {"triples": 1, "compared": 3, "agreeing": 2, "agreement": pytest.approx(2 / 3)}
    pairs = [{"annotators": sorted(["甲", "乙"]), **figures}]
    assert status == 200 and view["doubles"] == {**figures, "target": 0.9, "pairs": pairs}


def test_pages_and_health_answer(site: Any) -> None:
    base, _, _ = site
    import urllib.request

    for path, marker in (("/annotate", "三元组排序标注"), ("/admin?lang=en", "Annotation overview")):
        with urllib.request.urlopen(base + path, timeout=10) as response:
            page = response.read().decode()
        assert response.status == 200 and marker in page and "/static/annotation/" in page
    for path in ("/static/annotation/annotate.js", "/static/annotation/overview.js", "/static/web/page.js"):
        with urllib.request.urlopen(base + path, timeout=10) as response:
            assert response.status == 200
    assert call(base, "GET", "/health") == (200, {"status": "serving"})


def test_every_reply_has_the_security_headers_and_no_page_inline_code(site: Any) -> None:
    base, service, _ = site
    token = add_people(service, "张三")["张三"]
    for path, auth, status in [("/annotate", "", 200), ("/admin?lang=en", "", 200), ("/health", "", 200),
                               ("/api/me", "", 401), ("/api/me", token, 200), ("/api/tasks/next", token, 200),
                               ("/api/overview", token, 403), ("/static/annotation/annotate.js", "", 200),
                               ("/static/web/style.css", "", 200), ("/nowhere", "", 404)]:  # fmt: skip
        got, headers, body = fetch(base + path, token=auth)
        assert got == status, path
        assert_secure(headers, f"GET {path}")
        if headers["content-type"].startswith("text/html"):
            assert inline_code(body) == [], path
    got, headers, _ = fetch(base + "/api/tasks/" + "0" * 64 + "/annotation", "POST", b"{}")
    assert got == 401
    assert_secure(headers, "POST annotation")


def test_the_page_keeps_the_token_for_the_tab_only(site: Any) -> None:
    """sessionStorage, never localStorage: a token does not outlive the tab or reach the other tabs."""
    base = site[0]
    for script in ("annotate.js", "overview.js"):
        status, _, source = fetch(f"{base}/static/annotation/{script}")
        assert status == 200 and "sessionStorage" in source and "localStorage" not in source, script


def test_http_requests_are_counted_by_route_on_its_metrics(site: Any) -> None:
    base, service, _ = site
    tokens = add_people(service, "丁")
    before = parse(fetch(base + "/metrics")[2])
    task_path = "/api/tasks/{task_id}/annotation"
    calls = [("GET", "/api/me", 200), ("GET", "/api/tasks/next", 200), ("POST", "/api/tasks/t-none/annotation", 400),
             ("GET", "/nowhere/at/all", 404)]  # fmt: skip
    for method, path, status in calls:
        assert call(base, method, path, tokens["丁"], {} if method == "POST" else None)[0] == status, path
    text = fetch(base + "/metrics")[2]
    after = parse(text)
    for method, path, status in [("GET", "/api/me", 200), ("GET", "/api/tasks/next", 200),
                                 ("POST", task_path, 400), ("GET", "<unmatched>", 404)]:  # fmt: skip
        labels = {"method": method, "path": path, "status": str(status)}
        delta = sample_value(after, "http_requests_total", labels) - sample_value(before, "http_requests_total", labels)
        assert delta == 1, labels
    assert not [s for f in after.values() for s in f.samples if s.labels.get("path") in ("/metrics", "/nowhere/at/all")]
    assert promtool_problems(text) == ""
