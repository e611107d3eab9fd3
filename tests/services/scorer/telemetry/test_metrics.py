"""services/scorer/telemetry/metrics.py, scraped from a real scorer over HTTP after real gRPC and HTTP calls.

The scorer runs the tiny checkpoint on the torch backend (prefix sharing on, left truncation at 64 tokens) as
model id `watched`, with a store holding an evaluation run of `watched`. Every figure is checked against what the
calls' own replies say (tokens, truncation flags, rewards) or against numpy, as an exact delta between two
scrapes; the exposition passes `promtool check metrics`.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.error import HTTPError

import numpy as np
import pytest
import requests

from cheems.chat import Truncation
from services.scorer.client import RewardClient
from services.scorer.config import ScorerConfig
from services.scorer.runtime import ScorerServer
from services.scorer.tokenization import make_job, tokenize_job
from services.store import repository
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from tests.services.scorer.telemetry.scraping import labelled, promtool_check, scrape, value

MODEL = "watched"
WINDOW = 8
PROMPT = "请你仔细阅读下面这个问题，然后给出一个简洁而准确的中文回答：长城有多长？"
SHORT = ["约两万一千公里。", "很长很长。", "我不知道。"]
LONG = ["长城" * 200]
BENCH_SCORES = {"open:0": {"a": 1.5, "b": -0.5, "c": 0.25}, "open:1": {"a": 2.0, "b": -1.0}}


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store in which `watched` was evaluated: its newest succeeded run holds BENCH_SCORES."""
    url = f"sqlite:///{tmp_path_factory.mktemp('watch-store') / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    with session_scope(engine) as session:
        run = repository.create_run(session, ["open.jsonl"], "s:1", "paper", 5, 2, model_id=MODEL)
        for item, scores in BENCH_SCORES.items():
            repository.record_scores(session, run, item, scores)
        repository.end_run(session, run, {"overall": 0.5})
    engine.dispose()
    return url


@pytest.fixture(scope="module")
def server(tiny_model: Path, store_url: str) -> Iterator[ScorerServer]:
    config = ScorerConfig(
        model=str(tiny_model), model_id=MODEL, backend="torch", host="127.0.0.1", grpc_port=0, http_port=0,
        max_length=64, truncation="left", reward_window=WINDOW, db=store_url,
    )  # fmt: skip
    with ScorerServer(config) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: ScorerServer) -> Iterator[RewardClient]:
    with RewardClient(f"127.0.0.1:{server.grpc_port}", timeout=60) as c:
        yield c


def delta(after: str, before: str, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def get_reward(server: ScorerServer, body: dict) -> dict:
    reply = requests.post(f"http://127.0.0.1:{server.http_port}/get_reward", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_calls_phases_tokens_and_truncations_are_counted_exactly(server: ScorerServer, client: RewardClient) -> None:
    before = scrape(server.http_port)
    short = client.score_full(PROMPT, SHORT)
    long = client.score_full("总结：", LONG)  # over 64 tokens: cut from the left
    queries = ["问：一加一？答：二。", "问：天空是什么颜色的？答：在晴朗的白天通常是蓝色的，傍晚会变红。"]
    answered = get_reward(server, {"query": queries})
    after = scrape(server.http_port)
    ours = {"model_id": MODEL}

    assert delta(after, before, "cheems_scorer_requests_total", api="Score", status="OK", **ours) == 2
    assert delta(after, before, "cheems_scorer_requests_total", api="GetReward", status="OK", **ours) == 1
    assert delta(after, before, "cheems_scorer_latency_seconds_count", api="Score", **ours) == 2
    for phase in ("tokenize", "queue", "inference", "total"):  # the torch backend says how long each waited
        assert delta(after, before, "cheems_scorer_request_duration_seconds_count", phase=phase, **ours) == 3
    assert delta(after, before, "cheems_scorer_responses_total", **ours) == 3 + 1 + 2
    truncated = sum(short.truncated) + sum(long.truncated) + sum(answered["extra_logs"]["truncated"])
    assert truncated == 1 and delta(after, before, "cheems_scorer_truncations_total", **ours) == truncated
    # tokens: the queries' as the reply counts them, the Score calls' as the chat template and the cut make them
    query_tokens = sum(answered["extra_logs"]["query_tokens"])
    tokenizer = server.models.current.tokenizer  # type: ignore[union-attr]
    score_tokens = sum(
        len(e.input_ids)
        for prompt, responses in [(PROMPT, SHORT), ("总结：", LONG)]
        for e in tokenize_job(tokenizer, make_job(prompt, responses), 64, Truncation.LEFT)
    )
    prompt_tokens = delta(after, before, "cheems_scorer_prompt_tokens_total", **ours)
    assert prompt_tokens == query_tokens + score_tokens
    # how the forwards were used: what they computed = the sequences' tokens - the prefix shared + padding
    forward = delta(after, before, "cheems_scorer_forward_tokens_total", **ours)
    shared = delta(after, before, "cheems_scorer_prefix_shared_tokens_total", **ours)
    padding = delta(after, before, "cheems_scorer_padding_tokens_total", **ours)
    assert forward == prompt_tokens - shared + padding
    assert shared > 0  # the three responses to PROMPT computed it once
    assert padding > 0  # the two queries, of different lengths, side by side in one forward
    assert delta(after, before, "cheems_scorer_forward_sequences_sum", **ours) == 6
    promtool_check(after)


def test_a_refused_call_is_counted_with_no_model(server: ScorerServer, client: RewardClient) -> None:
    before = scrape(server.http_port)
    with pytest.raises(Exception, match="responses is empty"):
        client.score("你好", [])
    reply = requests.post(f"http://127.0.0.1:{server.http_port}/score", json={"prompt": "你好"}, timeout=30)
    assert reply.status_code == 400
    after = scrape(server.http_port)
    assert (
        delta(after, before, "cheems_scorer_requests_total", api="Score", status="INVALID_ARGUMENT", model_id="") == 2
    )
    assert delta(after, before, "cheems_scorer_requests_total", api="Score", status="OK") == 0


def test_models_loaded_now_in_flight_and_load_time(server: ScorerServer) -> None:
    text = scrape(server.http_port)
    [info] = labelled(text, "cheems_scorer_model_info", model_id=MODEL)
    assert info.labels == {"model_id": MODEL, "backend": "torch", "dtype": "float32", "default": "true"}
    assert value(text, "cheems_scorer_model_load_seconds", model_id=MODEL) > 0
    assert value(text, "cheems_scorer_in_flight", model_id=MODEL) == 0
    with server.models.lease():  # a call holds the model
        assert value(scrape(server.http_port), "cheems_scorer_in_flight", model_id=MODEL) == 1
    assert labelled(text, "cheems_scorer_backend_metrics_errors_total") == []  # torch: no engine to read


def test_the_reward_watch_is_numpys_over_the_last_window(server: ScorerServer, client: RewardClient) -> None:
    rewards: list[float] = []
    lengths: list[int] = []
    calls = [
        (PROMPT, ["约两万公里。", "长城非常非常长，横跨中国北方多个省份，总长度约两万一千公里。", "不清楚。"]),
        ("今天天气怎么样？", ["晴。", "今天多云转晴，气温在十五到二十度之间，适合出门。"]),
        ("你好", ["你好！", "您好，请问有什么可以帮您的吗？我可以回答问题、写作和翻译。", "嗨"]),
    ]
    for prompt, responses in calls:
        rewards += client.score(prompt, responses)
        lengths += [len(r) for r in responses]
    prompts = ["问：二加二？", "问：水的化学式是什么？"]
    queries = [prompts[0] + "答：四。", prompts[1] + "答：H2O，由两个氢原子和一个氧原子组成。"]
    rewards += get_reward(server, {"query": queries, "prompts": prompts})["rewards"]
    lengths += [len(q) - len(p) for q, p in zip(queries, prompts, strict=True)]  # the response after its prompt
    assert len(rewards) > WINDOW
    x, y = np.array(rewards[-WINDOW:]), np.array(lengths[-WINDOW:])
    text = scrape(server.http_port)
    ours = {"model_id": MODEL}
    assert value(text, "cheems_scorer_reward_window_rewards", **ours) == WINDOW
    assert value(text, "cheems_scorer_reward_mean", **ours) == pytest.approx(np.mean(x), abs=1e-9)
    assert value(text, "cheems_scorer_reward_std", **ours) == pytest.approx(np.std(x), abs=1e-9)
    r = np.corrcoef(x, y)[0, 1]
    assert value(text, "cheems_scorer_reward_length_correlation", **ours) == pytest.approx(r, abs=1e-9)
    bench = np.array([v for scores in BENCH_SCORES.values() for v in scores.values()])
    assert value(text, "cheems_scorer_reward_bench_mean", **ours) == pytest.approx(np.mean(bench))
    assert value(text, "cheems_scorer_reward_bench_std", **ours) == pytest.approx(np.std(bench))
    # every served reward in the histogram, not only the window's
    assert value(text, "cheems_scorer_reward_count", **ours) >= len(rewards)
    watch = client.model_info().models[0].reward_watch  # GetModelInfo says the same (`cheems status` shows it)
    assert (watch.count, watch.bench_run_id != "") == (WINDOW, True)
    assert (watch.mean, watch.std, watch.length_correlation) == pytest.approx((np.mean(x), np.std(x), r))
    assert (watch.bench_mean, watch.bench_std) == pytest.approx((np.mean(bench), np.std(bench)))
    promtool_check(text)


def test_with_metrics_off_nothing_is_served_and_scoring_works(tiny_model: Path) -> None:
    config = ScorerConfig(
        model=str(tiny_model), backend="torch", host="127.0.0.1", grpc_port=0, http_port=0, metrics=False
    )
    with ScorerServer(config) as off, RewardClient(f"127.0.0.1:{off.grpc_port}", timeout=60) as client:
        assert len(client.score("你好", ["你好！", "嗨"])) == 2
        with pytest.raises(HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{off.http_port}/metrics", timeout=10)
        assert refused.value.code == 404
        assert not client.model_info().models[0].HasField("reward_watch")  # nothing watched, no store
        assert off.metrics.render().decode().count("cheems_scorer_") == 0
