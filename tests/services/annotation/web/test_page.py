"""The annotator's page in a real Chromium against a real `cheems service annotation --http-port` process on the
real broker: sign in, rank by keyboard and by mouse, submit, a wrong token, a double submit, a task completed
elsewhere, the admin overview. Rankings must reach the store and cheems.rankings.v1. Screenshots go to
out/screenshots/annotator-*.png."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Engine, select

from services.annotation.service import AnnotationService
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.store import accounts, repository
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import Annotation
from tests.services.accounts import give
from tests.services.annotation.web.pages_data import add_prompt
from tests.services.processes import CHEEMS, Service

LONG = "\n\n".join(f"{i}. 第 {i} 步：先把数组分成两半，再分别排序，最后合并。" for i in range(1, 40))
QUICKSORT = [
    (
        "r1",
        "快速排序的**平均**时间复杂度是 $O(n \\log n)$，最坏情况是 $O(n^2)$。\n\n```python\n"
        "def quicksort(a):\n    if len(a) <= 1:\n        return a\n    p, *rest = a\n"
        "    return quicksort([x for x in rest if x < p]) + [p] + quicksort([x for x in rest if x >= p])\n```",
    ),
    (
        "r2",
        "平均 O(n log n)。<script>alert('x')</script> 这段脚本只会显示成文字。\n\n| 情况 | 复杂度 |\n|---|---|\n"
        "| 平均 | O(n log n) |\n| 最坏 | O(n²) |",
    ),
    ("r3", "我不太确定，可能是 O(n)。\n\n" + LONG),
]


@dataclass
class Site:
    base: str
    db: str
    engine: Engine
    service: AnnotationService  # the test's own handle on the store (no publisher)


@pytest.fixture(scope="module")
def site(broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A real annotation service process with its page on a free port, over a SQLite file."""
    tmp = tmp_path_factory.mktemp("web")
    db = f"sqlite:///{tmp / 'cheems.db'}"
    upgrade(db)
    args = ["service", "annotation", "--db", db, "--bootstrap", broker.bootstrap, "--port", "0", "--http-port", "0"]
    process = Service(args, tmp / "annotation")
    try:
        base = wait_for_page(process)
        engine = create_engine_for(StoreConfig(db))
        yield Site(base, db, engine, AnnotationService(engine))
        engine.dispose()
        assert process.stop() == 0, process.output()
    finally:
        process.kill()


def wait_for_page(process: Service, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while not (found := re.search(r"annotator page (http://\S+)/annotate", process.output())):
        assert process.process.poll() is None and time.monotonic() < deadline, process.output()
        time.sleep(0.1)
    return found.group(1)


def person(site: Site, name: str, admin: bool = False) -> str:
    with session_scope(site.engine) as session:
        return accounts.add_annotator(session, name, admin)


def sign_in(page: Any, site: Site, token: str, path: str = "/annotate") -> None:
    page.goto(site.base + path)
    page.fill("#token", token)
    page.press("#token", "Enter")


def stored(site: Site, annotator: str) -> list[Annotation]:
    with session_scope(site.engine) as session:
        query = select(Annotation).where(Annotation.annotator == annotator).order_by(Annotation.created_at)
        return list(session.scalars(query))


def test_cli_token_sign_in_keyboard_ranking_reaches_store_and_rankings_topic(
    page: Any, site: Site, screenshot: Any, events: Any
) -> None:
    added = subprocess.run([*CHEEMS, "annotators", "add", "张三", "--db", site.db], capture_output=True, text=True)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    history = [("user", "什么是排序算法？"), ("assistant", "排序算法把一组元素按顺序排列。")]
    prompt_id = add_prompt(site.service, "快速排序的时间复杂度是多少？请给出代码。", QUICKSORT,
                           system_prompt="你是一位耐心的算法老师。", history=history)  # fmt: skip
    sign_in(page, site, token)
    page.wait_for_selector("#responses .response")
    assert page.inner_text("#who") == "张三"
    assert page.inner_text("#prompt") == "快速排序的时间复杂度是多少？请给出代码。"
    assert page.locator(".response h3").all_inner_texts() == ["回答 A", "回答 B", "回答 C"]
    assert "<script>" in page.inner_text(".response >> nth=1")  # shown as text, never run
    assert page.inner_text(".response >> nth=0 >> .math") == "$O(n \\log n)$"
    screenshot(page, "annotator-task")

    for key in ("b", "1", "2", "2"):  # B first; then A and C (the next unplaced ones) tie second
        page.keyboard.press(key)
    assert page.inner_text("#summary") == "排序：B > A = C"
    screenshot(page, "annotator-ranked")
    page.keyboard.press("?")
    assert page.is_visible("#help")
    screenshot(page, "annotator-shortcuts")
    page.keyboard.press("?")
    page.keyboard.press("Enter")
    page.wait_for_selector("#empty:not(.hidden)")
    assert "已提交" in page.inner_text("#notice") and page.inner_text("#count") == "1"

    [annotation] = stored(site, "张三")
    assert (annotation.prompt_id, annotation.result, annotation.discarded) == (
        prompt_id, {"order": [["r2"], ["r1", "r3"]]}, []
    )  # fmt: skip
    [(_, ranking)] = events(topics.RANKINGS, {prompt_id}, until=lambda found: len(found) >= 1)
    assert dict(ranking.ranking.rank) == {"r1": 2, "r2": 1, "r3": 2}


def test_mouse_ranking_with_a_discard_and_the_next_task_at_once(page: Any, site: Site, screenshot: Any) -> None:
    token = person(site, "李四")
    first = add_prompt(site.service, "用一句话介绍长城。", [("r1", "长城是中国古代的军事防御工程。"),
                       ("r2", "�����"), ("r3", "长城很长。")])  # fmt: skip
    add_prompt(site.service, "把“你好”翻译成英文。", [("r1", "Hello"), ("r2", "Hi"), ("r3", "你好")])
    sign_in(page, site, token, "/annotate?lang=en")
    page.wait_for_selector("#responses .response")
    assert page.inner_text("#prompt") == "用一句话介绍长城。"
    cards = page.locator(".response")
    cards.nth(2).locator("button.place", has_text="1").click()
    cards.nth(0).locator("button.place", has_text="2").click()
    cards.nth(1).locator("button.discard").click()
    assert page.inner_text("#summary") == "Order: C > A (unusable: B)"
    screenshot(page, "annotator-mouse-en")
    page.click("#submit")
    page.wait_for_function("() => document.querySelector('#prompt').textContent.includes('你好')")  # the next task
    assert "Submitted" in page.inner_text("#notice")
    [annotation] = stored(site, "李四")
    assert (annotation.prompt_id, annotation.result, annotation.discarded) == (
        first,
        {"order": [["r3"], ["r1"]]},
        ["r2"],
    )


def test_a_wrong_token_is_refused(page: Any, site: Site, screenshot: Any) -> None:
    sign_in(page, site, "chm_not-a-real-token")
    page.wait_for_selector("#notice.error:not(.hidden)")
    assert "令牌无效" in page.inner_text("#notice")
    assert page.is_visible("#signin") and not page.is_visible("#task")
    screenshot(page, "annotator-wrong-token")


def test_a_double_submit_is_stored_once_and_a_task_completed_elsewhere_is_explained(
    page: Any, site: Site, screenshot: Any
) -> None:
    token = person(site, "王五")
    add_prompt(site.service, "1+1 等于几？", [("r1", "2"), ("r2", "3"), ("r3", "二")])
    second = add_prompt(site.service, "2+2 等于几？", [("r1", "4"), ("r2", "5"), ("r3", "四")])
    sign_in(page, site, token)
    page.wait_for_selector("#responses .response")
    for key in ("1", "3", "1"):  # A first, B third, C tied with A
        page.keyboard.press(key)
    with page.expect_request(re.compile(r"/annotation$")) as sent:
        page.keyboard.press("Enter")
        page.keyboard.press("Enter")  # pressed twice: one request while the first is in flight
    page.wait_for_function("() => document.querySelector('#prompt').textContent.includes('2+2')")
    body = sent.value.post_data
    replay = page.evaluate(
        """([url, body]) => fetch(url, {method: "POST", body, headers: {"content-type": "application/json",
             authorization: "Bearer " + sessionStorage.getItem("cheems.annotator.token")}}).then(r => r.json())""",
        [sent.value.url, body],
    )
    assert replay["created"] is False and "already submitted" in replay["message"]
    [annotation] = stored(site, "王五")
    assert annotation.result == {"order": [["r1", "r3"], ["r2"]]} and json.loads(body)["annotation_id"] == annotation.id

    # someone completes the task on screen meanwhile (a gRPC client here)
    [task] = [t for t in site.service.open_tasks(second)]
    give(site.engine, "机器人", task.task_id)  # moved to them (as ReassignTask does), and they complete it
    site.service.submit("grpc-1", second, "机器人", "human", {"order": [["r1"], ["r3"], ["r2"]]}, [], task.task_id)
    for key in ("x", "1", "2"):  # A unusable, then B and C in turn
        page.keyboard.press(key)
    assert page.inner_text("#summary") == "排序：B > C（不可用：A）"
    page.keyboard.press("Enter")
    page.wait_for_selector("#notice.error:not(.hidden)")
    assert "已经完成" in page.inner_text("#notice")
    page.wait_for_selector("#empty:not(.hidden)")
    screenshot(page, "annotator-completed-elsewhere")
    assert len(stored(site, "王五")) == 1


def test_an_annotator_left_only_triples_of_a_prompt_they_did_is_told_so(page: Any, site: Site) -> None:
    token = person(site, "孙七")
    prompt_id = add_prompt(site.service, "四个回答，四个三元组。", [(f"r{i}", f"回答{i}") for i in range(1, 5)])
    sign_in(page, site, token)
    page.wait_for_selector("#responses .response")
    for key in ("1", "2", "3"):
        page.keyboard.press(key)
    page.keyboard.press("Enter")
    page.wait_for_selector("#withheld:not(.hidden)")  # three triples left, each for another annotator
    assert "还有 3 个三元组任务" in page.inner_text("#withheld") and page.is_visible("#empty")
    for n, task in enumerate(site.service.open_tasks(prompt_id)):  # others do them (the overview's queue stays)
        order = {"order": [[k] for k in task.contents]}
        give(site.engine, f"他人{n}", task.task_id)
        site.service.submit(f"others-{n}", prompt_id, f"他人{n}", "human", order, [], task.task_id)


def double(site: Site, text: str, orders: dict[str, list[list[str]]]) -> None:
    """A prompt of one triple and its second copy (double annotation), annotated by the two named people."""
    prompt_id = add_prompt(site.service, text, [("r1", "甲"), ("r2", "乙"), ("r3", "丙")])
    with session_scope(site.engine) as session:
        repository.create_tasks(session, prompt_id, [["r1", "r2", "r3"]], "triple", copy=1)
    for (name, order), task in zip(orders.items(), site.service.open_tasks(prompt_id), strict=True):
        give(site.engine, name, task.task_id)
        site.service.submit(f"{name}-{task.task_id[:8]}", prompt_id, name, "human", {"order": order}, [], task.task_id)


def annotate_four(site: Site, text: str, careless: int) -> None:
    """A prompt of four responses (four triples): 马虎 does the first `careless` tasks swapping two neighbours
    of r1 > r2 > r3 > r4 (a conflict), 细心 the others in that order; submitted over the gRPC path."""
    prompt_id = add_prompt(site.service, text, [(f"r{i}", f"回答{i}") for i in range(1, 5)])
    for i, task in enumerate(site.service.open_tasks(prompt_id)):
        keys, name = sorted(task.contents), "马虎" if i < careless else "细心"
        if name == "马虎":
            neighbours = int(keys[2][1]) - int(keys[1][1]) == 1
            keys = [keys[0], keys[2], keys[1]] if neighbours else [keys[1], keys[0], keys[2]]
        order = {"order": [[k] for k in keys]}
        give(site.engine, name, task.task_id)
        site.service.submit(f"{name}-{task.task_id[:8]}", prompt_id, name, "human", order, [], task.task_id)


def test_the_admin_overview_shows_every_annotator_and_flags_the_careless(
    page: Any, site: Site, screenshot: Any
) -> None:
    token = person(site, "组长", admin=True)
    person(site, "细心")
    person(site, "马虎")
    annotate_four(site, "写一首关于秋天的诗。", careless=0)
    annotate_four(site, "解释一下什么是递归。", careless=1)
    sign_in(page, site, token, "/admin")
    page.wait_for_selector("#annotators tbody tr")
    rows = {r.get_attribute("data-name"): r for r in page.locator("#annotators tbody tr").all()}
    assert {"张三", "李四", "王五", "组长", "机器人", "细心", "马虎"} <= set(rows)
    assert rows["马虎"].locator(".badge.flag").count() == 1 and rows["细心"].locator(".badge.flag").count() == 0
    assert rows["细心"].locator("td.agreement").inner_text() == f"{100 * 20 / 21:.1f}%"
    assert rows["马虎"].locator("td.cycles").inner_text() == "100.0%"
    assert rows["李四"].locator("td.held").inner_text() == "1"  # holds the translation task
    assert rows["李四"].locator("td.idle").inner_text() == "0" and rows["李四"].locator("td.oldest").inner_text() == "0"
    assert rows["王五"].locator("td").nth(5).inner_text() == "1"  # done
    assert not page.is_visible("#unfinishable")  # enough accounts for every prompt's triples
    assert rows["张三"].locator("td.agreement").inner_text() == "100.0%"
    assert "待标注三元组任务：1" in page.inner_text("#queue")
    assert "尚无两份都已完成的双份三元组" in page.inner_text("#doubles-summary") and not page.is_visible("#pairs")
    assert "没有回答被规则过滤" in page.inner_text("#filtered-summary") and not page.is_visible("#filtered")
    double(site, "双人标注的题。", {"双甲": [["r1"], ["r2"], ["r3"]], "双乙": [["r2"], ["r1"], ["r3"]]})
    garbled = "This reply forgot the question was Chinese and rambled on in English throughout."
    site.service.take_sample("", "规则过滤的题。", [("r1", "一"), ("r2", garbled), ("r3", "三")], [], None, "t", [], 3)
    page.reload()
    page.wait_for_selector("#pairs tbody tr")
    assert page.inner_text("#filtered-summary") == "未进入标注任务的回答：non_chinese<0.3 × 1"
    [filtered_row] = page.locator("#filtered tbody tr").all_inner_texts()
    assert filtered_row.split("\t")[1:] == ["r2", "non_chinese<0.3", garbled]
    summary = page.inner_text("#doubles-summary")
    assert "两份都已完成的双份三元组：1" in summary and "一致率：66.7%（论文目标 90.0%）" in summary
    assert "低于目标" in summary
    assert page.locator("#pairs tbody tr").all_inner_texts() == ["双乙 / 双甲\t1\t3\t66.7%"]
    screenshot(page, "annotator-admin")
    page.click("a[data-lang=en]")
    page.wait_for_selector("#annotators tbody tr")
    assert page.locator("#annotators th").first.inner_text() == "Annotator"


def test_a_non_admin_cannot_open_the_overview(page: Any, site: Site) -> None:
    sign_in(page, site, person(site, "赵六"), "/admin")
    page.wait_for_selector("#notice.error:not(.hidden)")
    assert "无权访问" in page.inner_text("#notice")
    assert page.locator("#annotators tbody tr").count() == 0
