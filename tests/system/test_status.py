"""`cheems status`: health of each service, stage counts and the models best first, as text and JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine

from services.hosting import HostConfig
from services.ingestion.server import host
from services.ingestion.service import IngestionService
from services.store import lifecycle, registry, repository
from services.store.accounts import AccountBook
from services.store.db import session_scope
from services.store.filtered import keep_passing
from system.leaderboard import leaderboard
from system.status import render, status

SHA = "b" * 64
BENCH = [1.0, -2.0, 0.5]  # the rewards a model gave on its bench run
RESULT = {"semantics": "paper", "overall": 0.75, "subsets": {"open": {"accuracy": 0.8, "exact_match": 0.7,
          "ece": None, "per_category": {}, "prompts": 1, "pairs": 1}}}  # fmt: skip


def fill(engine: Engine) -> list[str]:
    with session_scope(engine) as session:
        pid, _ = repository.add_sample(session, "你好", [("a", "好"), ("b", "坏")], ["闲聊"])
        repository.add_annotation(session, "x1", pid, "甲", "human", {"better": "a", "worse": "b"}, [], None)
        repository.save_ranking(session, pid, {"a": 1, "b": 2}, 0, 0)
        other, _ = repository.add_sample(session, "再见", [("c", "Goodbye in English only, sorry!"), ("d", "再见")], [])
        keep_passing(session, other, lambda content: None if content == "再见" else "non_chinese<0.3")
        details = {"recipe": "human", "settings": {}, "counts": {"pairs": 1}}
        registry.add_dataset(session, SHA, "human", "d.jsonl", 1, 1, 1, details=details)
        models = []
        for n in range(2):
            training = registry.create_training(session, SHA, "tiny-cpu", {}, "local", "out/{id}")
            if n == 1:  # reported to TensorBoard and MLflow: the model keeps what its training recorded
                registry.update_training(session, training.id, tracking={"tensorboard": "/tb/1", "mlflow": "9f3e"})
            models.append(registry.register_model(session, training.id, f"out/{training.id}/model", None)[0].id)
        going = registry.create_training(session, SHA, "tiny-cpu", {}, "local", "out/{id}")
        registry.update_training(
            session,
            going.id,
            state="running",
            step=3,
            total_steps=9,
            loss=0.5,
            tracking={"tensorboard": f"/out/{going.id}/tensorboard"},
        )
        run = repository.create_run(session, ["open.jsonl"], "s:1", "paper", 5, 1, model_id=models[1])
        repository.end_run(session, run, RESULT)
        repository.create_run(session, ["open.jsonl"], "s:1", "paper", 5, 3, model_id=models[0])
    return models


def test_the_report_and_its_json_shape(engine: Engine) -> None:
    models = fill(engine)
    grpc_host = host(IngestionService(engine), HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    try:
        report = status(engine, {"ingestion": f"127.0.0.1:{grpc_host.port}", "scorer": "127.0.0.1:1"})
    finally:
        grpc_host.stop(0)
    assert report["services"] == {"ingestion": "SERVING", "scorer": "UNREACHABLE"}
    assert (report["samples"], report["annotations"], report["rankings"]) == (2, 1, 1)
    assert report["rule_filtered"] == {"non_chinese<0.3": 1}
    [dataset] = report["datasets"]
    assert (dataset["id"], dataset["recipe"], dataset["pairs"]) == (SHA, "human", 1)
    assert dataset["supervisor_model_id"] is None
    assert dataset["details"] == {"recipe": "human", "settings": {}, "counts": {"pairs": 1}}
    assert [m["id"] for m in report["models"]] == [models[1], models[0]]  # the evaluated one first
    assert report["models"][0]["overall"] == 0.75 and report["models"][1]["overall"] is None
    assert report["models"][0]["tracking"] == {"tensorboard": "/tb/1", "mlflow": "9f3e"}
    assert report["models"][1]["tracking"] is None
    [going] = report["training_runs"]  # the trainings still going, with where they report
    assert (going["state"], going["step"], going["total_steps"], going["loss"]) == ("running", 3, 9, 0.5)
    assert going["tracking"] == {"tensorboard": f"/out/{going['id']}/tensorboard"}
    assert {r["state"] for r in report["eval_runs"]} == {"done", "running"}
    done = next(r for r in report["eval_runs"] if r["state"] == "done")
    assert (done["model_id"], done["overall"]) == (models[1], 0.75)
    assert report["production"] is None and [m["state"] for m in report["models"]] == ["candidate", "candidate"]
    with session_scope(engine) as session:
        lifecycle.promote(session, models[0], "person:ann")
    promoted = status(engine, {})
    assert promoted["production"] == models[0]
    by_id = {m["id"]: (m["state"], m["aliases"]) for m in promoted["models"]}
    assert by_id == {models[0]: ("production", ["production"]), models[1]: ("candidate", [])}
    assert f"production: {models[0]}" in render(promoted)
    json.dumps(report)  # the --json output
    text = render(report)
    assert "ingestion    SERVING" in text and f" 1. {models[1]}" in text and "datasets 1" in text
    assert "kept out of annotation by the rule filter: non_chinese<0.3 1" in text
    assert f"evaluating {models[0]}: 0/3" in text
    assert "      reported to tensorboard /tb/1, mlflow run 9f3e" in text.splitlines()
    going_line = f"training {going['id']} (running): step 3/9, loss 0.5000, reported to tensorboard /out/"
    assert going_line in text
    board = leaderboard(engine)
    assert board.splitlines()[2].startswith(models[1]) and "0.7500" in board


def test_cli_json_on_a_real_store(engine: Engine, db_url: str) -> None:
    fill(engine)
    rule = ["--people-per-prompt", "3", "--lease", "60"]
    run = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "status", "--db", db_url, "--json", "--timeout", "0.5", *rule],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(run.stdout)
    assert set(report) >= {"services", "samples", "annotations", "rankings", "datasets", "models", "eval_runs"}
    assert "production" in report
    assert {"id", "path", "dataset", "overall", "state", "aliases", "tracking"} <= set(report["models"][0])
    assert report["training_runs"][0]["tracking"]["tensorboard"].endswith("/tensorboard")
    assert {"id", "model_id", "state", "overall"} <= set(report["eval_runs"][0])
    queue = report["annotation_queue"]
    assert (queue["people_per_prompt"], queue["lease_seconds"], queue["held"]) == (3, 60.0, [])


def test_the_scorers_models_their_dtype_and_reward_watch(tiny_checkpoint: Callable[..., Path], tmp_path: Path) -> None:
    """The scorer's models, and for the one that served, its reward watch beside its bench run and overall."""
    from services.scorer.client import RewardClient
    from services.scorer.config import ScorerConfig
    from services.scorer.runtime import ScorerServer
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    model_id = fill(engine)[1]  # registered, evaluated (overall 0.75); its run's scores:
    with session_scope(engine) as session:
        run = repository.create_run(session, ["open.jsonl"], "s:1", "paper", 5, 1, model_id=model_id)
        repository.record_scores(session, run, "open:0", dict(zip("abc", BENCH, strict=True)))
        repository.end_run(session, run, RESULT)
    token = "s3cret-Q7vK2mN9xR4tW8yB6pL3-token"
    config = ScorerConfig(
        model=str(tiny_checkpoint()), model_id=model_id, backend="torch", grpc_port=0, http_port=-1,
        dtype="bfloat16", token=token, db=url,
    )  # fmt: skip
    address = "127.0.0.1:{port}"
    with ScorerServer(config) as server, RewardClient(address.format(port=server.grpc_port), token=token) as client:
        refused = status(None, {"scorer": address.format(port=server.grpc_port)})  # health is open, models not
        before = status(None, {"scorer": address.format(port=server.grpc_port)}, token=token)
        responses = ["你好！", "您好，请问有什么可以帮您的吗？", "嗨"]
        rewards = client.score("你好", responses)
        report = status(engine, {"scorer": address.format(port=server.grpc_port)}, token=token)
    engine.dispose()
    assert refused["services"] == {"scorer": "SERVING"} and refused["served"].startswith("UNAUTHENTICATED")
    assert before["services"] == {"scorer": "SERVING"}
    bench = {"count": 0, "mean": None, "std": None, "length_correlation": None,
             "bench_mean": pytest.approx(np.mean(BENCH)), "bench_std": pytest.approx(np.std(BENCH)),
             "bench_run_id": run}  # fmt: skip
    assert before["served"] == [
        {"model_id": model_id, "dtype": "bfloat16", "backend": "torch", "default": True, "in_flight": 0,
         "reward_watch": bench}
    ]  # fmt: skip
    assert f"scorer models: {model_id} (default, bfloat16)" in render(before)
    watch = report["served"][0]["reward_watch"]
    lengths = [len(r) for r in responses]
    assert (watch["count"], watch["bench_run_id"]) == (3, run)
    assert (watch["mean"], watch["std"]) == pytest.approx((np.mean(rewards), np.std(rewards)))
    assert watch["length_correlation"] == pytest.approx(np.corrcoef(rewards, lengths)[0, 1])
    line = next(line for line in render(report).splitlines() if line.startswith(f"  reward watch {model_id}:"))
    assert f"served mean {np.mean(rewards):.3f} std {np.std(rewards):.3f} (3 rewards)" in line
    assert f"bench mean {np.mean(BENCH):.3f} std {np.std(BENCH):.3f}" in line and "CheemsBench overall 0.7500" in line
    json.dumps(report)


def test_a_judge_that_does_not_answer_is_left_out_with_its_metrics_url() -> None:
    from cheems.processes.ports import free_port

    nobody = f"127.0.0.1:{free_port()}"
    urls = {"ingestion": "http://127.0.0.1:1/metrics", "judge": "http://127.0.0.1:2/metrics"}
    report = status(None, {"ingestion": nobody, "judge": nobody}, 0.5, metrics=urls, optional=("judge",))
    assert report["services"] == {"ingestion": "UNREACHABLE"}
    assert report["metrics"] == {"ingestion": "http://127.0.0.1:1/metrics"}


def test_status_says_who_holds_which_tasks_and_which_prompts_the_accounts_cannot_finish(engine: Engine) -> None:
    from datetime import UTC, datetime, timedelta

    from services.annotation.algorithm.protocol import triple_tasks
    from services.annotation.config import QueueConfig
    from services.store.accounts import add_annotator
    from services.store.annotators import assign

    seven = [(f"r{i}", f"第{i}个回答") for i in range(1, 8)]  # 7 responses: 11 triples
    with session_scope(engine) as session:
        for name in [f"标注员{n}" for n in range(8)]:
            add_annotator(session, name)
        for n in range(2):
            pid, _ = repository.add_sample(session, f"七个回答{n}", seven, ["推理"])
            repository.create_tasks(session, pid, triple_tasks([k for k, _ in seven]), "triple")
        assign(session, "标注员1", datetime.now(UTC), QueueConfig(), limit=1)
        assign(session, "标注员0", datetime.now(UTC) - timedelta(hours=1), QueueConfig())  # idle for an hour
    report = status(engine, {})
    queue = report["annotation_queue"]
    assert (queue["open_triples"], queue["free_triples"], queue["people_per_prompt"]) == (22, 21, 0)
    held = {h["annotator"]: (h["tasks"], h["idle"]) for h in queue["held"]}
    assert held == {"标注员0": (2, 2), "标注员1": (1, 0)}  # one triple of each prompt: the paper's rule
    assert queue["held"][0]["oldest_seconds"] >= 3600
    assert queue["unfinishable"] == {"prompts": 2, "needed": 11, "accounts": 8}
    text = render(report)
    assert (
        "annotation queue: 22 open triples, 21 free; held by 标注员0 2 (oldest 60 min, 2 idle past the lease)" in text
    )
    assert (
        "  2 prompts cannot be finished: one needs up to 11 different people (--people-per-prompt 0: every triple a "
        "different person) and 8 active accounts annotate; set the annotation service's --people-per-prompt 8"
    ) in text
    eight = status(engine, {}, queue=QueueConfig(people_per_prompt=8))["annotation_queue"]
    assert eight["unfinishable"] == {"prompts": 0, "needed": 0, "accounts": 8}
    assert "cannot be finished" not in render(status(engine, {}, queue=QueueConfig(people_per_prompt=8)))
