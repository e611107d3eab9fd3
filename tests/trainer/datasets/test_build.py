"""Datasets from the store (SQLite and PostgreSQL): the file, its hash, the registry row, the event (queued in the
outbox with the dataset: a broker outage delays it, loses none), bad recipes."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
import torch
from sqlalchemy import Engine

from cheems.chat import Conversation, encode_many
from cheems.errors import InvalidInput
from cheems.formats.preference import read_preference
from cheems.forward import forward_rewards
from cheems.model import load_model
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.bus.relay import EventRelay, RelayConfig
from services.store import registry, repository
from services.store.db import session_scope
from services.store.filtered import keep_passing
from services.store.outbox import StoreOutbox
from tests.trainer.conftest import read_events
from trainer.datasets.build import DatasetOptions, NoSupervisor, create_dataset, dataset_details
from trainer.datasets.recipes import (
    PAPER_RECIPE,
    DatasetStats,
    DistantSettings,
    EmptyDataset,
    UnknownDatasetRecipe,
    dataset_recipe,
)

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

JIA = ("什么是奖励模型？", [("a", "打分的模型"), ("b", "一种评价回答的模型"), ("c", "不知")])
YI = ("你好", [("x", "你好！"), ("y", "嗯")])
BING = ("一加一", [("p", "二"), ("q", "三"), ("r", "乱码乱码")])
HISTORY = [("user", "在吗"), ("assistant", "在")]


def seed(engine: Engine) -> dict[str, str]:
    """Three ranked prompts: 甲 human a > b > c, AI c > a; 乙 AI x > y (history); 丙 human p > r > q, r discarded."""
    with session_scope(engine) as s:
        jia, _ = repository.add_sample(s, JIA[0], JIA[1], ["知识"], system_prompt="你是助手")
        yi, _ = repository.add_sample(s, YI[0], YI[1], ["闲聊"], history=HISTORY)
        bing, _ = repository.add_sample(s, BING[0], BING[1], ["数学"])
        repository.add_annotation(s, "h1", jia, "alice", "human", {"order": [["a"], ["b"], ["c"]]})
        repository.add_annotation(s, "j1", jia, "judge", "ai", {"better": "c", "worse": "a"})
        repository.add_annotation(s, "j2", yi, "judge", "ai", {"better": "x", "worse": "y"})
        repository.add_annotation(s, "h3", bing, "bob", "human", {"order": [["p"], ["r"], ["q"]]}, ["r"])
        for pid, first in ((jia, "a"), (yi, "x"), (bing, "p")):
            repository.save_ranking(s, pid, {first: 1}, 0, 0)  # a ranking makes the prompt part of datasets
    return {"jia": jia, "yi": yi, "bing": bing}


def lines(path: str) -> dict[str, dict]:
    return {obj["input"]: obj for obj in map(json.loads, Path(path).read_text(encoding="utf-8").splitlines())}


def test_human_dataset_is_content_addressed_and_announced_once(
    engine: Engine, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    seed(engine)
    options = DatasetOptions(str(tmp_path))
    dataset, created = create_dataset(engine, "human", options)
    assert created and dataset.id == hashlib.sha256(Path(dataset.path).read_bytes()).hexdigest()
    assert dataset.path == str(tmp_path / "datasets" / f"{dataset.id}.jsonl")
    assert (dataset.prompts, dataset.pairs, dataset.rankings, dataset.supervisor_model_id) == (2, 4, 2, None)
    written = lines(dataset.path)
    assert written[JIA[0]]["annotations"] == [["a", "b", "1"], ["a", "c", "1"], ["b", "c", "1"]]
    assert written[JIA[0]]["sys_prompt"] == "你是助手" and written[JIA[0]]["category"] == ["知识"]
    assert written[BING[0]]["annotations"] == [["p", "q", "1"]]  # r was discarded
    assert [r["id"] for r in written[BING[0]]["responses"]] == ["p", "q"]
    assert {len(item.pairs) for item in read_preference(dataset.path)} == {3, 1}  # the trainer's reader takes it
    counts = {"responses_filtered_by_rule": {}, "prompts": 2, "rankings": 2, "prompts_by_source": {"human": 2},
              "ai_relations": 0, "pairs": 4,
              "ai_relations_dropped_by_distant_supervision": 0, "ai_ties_dropped_by_distant_supervision": 0,
              "pairs_by_source": {"human": {"before": 4, "after": 4}}}  # fmt: skip
    assert dataset.details == {"recipe": "human", "settings": {}, "counts": counts}  # no step with settings ran

    again, created = create_dataset(engine, "human", options)
    assert (again.id, created) == (dataset.id, False)
    publisher = Publisher(broker.bootstrap)
    assert EventRelay(StoreOutbox(engine, topics.RELAYED_BY["training"]), publisher).drain() == 1  # the service's
    publisher.close()
    events = [e for e in read_events(broker.bootstrap, topics.DATASETS) if e.dataset.path == dataset.path]
    assert len(events) == 1 and events[0].dataset.pairs == 4 and events[0].dataset.recipe == "human"
    with session_scope(engine) as s:
        assert [d.id for d in registry.list_datasets(s)] == [dataset.id]


def test_a_dataset_made_while_the_broker_is_away_waits_in_the_outbox_and_arrives_later(
    engine: Engine, tmp_path: Path
) -> None:
    seed(engine)
    broker = EmbeddedBroker().start()
    broker.create_topics([topics.DATASETS], partitions=2)
    publisher = Publisher(broker.bootstrap, max_block_ms=2000, connect=False)
    fast = RelayConfig(sweep_every=0.5, ack_timeout=2.0, max_backoff=1.0)
    relay = EventRelay(StoreOutbox(engine, topics.RELAYED_BY["training"]), publisher, fast).start()
    replaced = None
    try:
        broker.stop()
        dataset, created = create_dataset(engine, "human", DatasetOptions(str(tmp_path)))
        relay.kick()
        (waiting,) = StoreOutbox(engine).take(10)  # stored, and its event durable beside it
        assert (waiting.topic, waiting.key, created) == (topics.DATASETS, dataset.id, True)
        replaced = EmbeddedBroker(port=broker.port).start()  # the same address, a new broker (topics anew)
        replaced.create_topics([topics.DATASETS], partitions=2)
        (event,) = read_events(replaced.bootstrap, topics.DATASETS)
        assert (event.dataset.dataset_id, event.dataset.pairs) == (dataset.id, 4)
        deadline = time.monotonic() + 30
        while StoreOutbox(engine).waiting():  # deleted once acknowledged
            assert time.monotonic() < deadline, "the outbox was not emptied"
            time.sleep(0.1)
    finally:
        relay.stop()
        publisher.close(timeout=5)
        if replaced is not None:
            replaced.stop()


def test_responses_the_rule_filter_kept_out_are_left_out_and_counted(engine: Engine, tmp_path: Path) -> None:
    ids = seed(engine)
    with session_scope(engine) as s:  # 丙's q ("三") kept out of annotation: 丙 keeps no pair (r was discarded)
        keep_passing(s, ids["bing"], lambda content: "non_chinese<0.3" if content == "三" else None)
    dataset, _ = create_dataset(engine, "human", DatasetOptions(str(tmp_path)))
    assert (dataset.prompts, dataset.pairs) == (1, 3) and BING[0] not in lines(dataset.path)
    assert dataset.details is not None
    assert dataset.details["counts"]["responses_filtered_by_rule"] == {"non_chinese<0.3": 1}


def test_no_pairs_or_an_unknown_recipe_stores_nothing(engine: Engine, tmp_path: Path) -> None:
    options = DatasetOptions(str(tmp_path))
    with pytest.raises(EmptyDataset, match="no preference pair among 0 ranked prompts"):
        create_dataset(engine, "human", options)
    with session_scope(engine) as s:
        pid, _ = repository.add_sample(s, "一加一", [("p", "二"), ("q", "三")], ["数学"])
        repository.add_annotation(s, "h", pid, "bob", "human", {"equal": ["p", "q"]})  # a tie: no pair
        repository.save_ranking(s, pid, {"p": 1, "q": 1}, 0, 0)
    for name in ("human", "ai-debias"):
        with pytest.raises(EmptyDataset):
            create_dataset(engine, name, options)
    with pytest.raises(UnknownDatasetRecipe):
        create_dataset(engine, "gpt4", options)
    assert not list(tmp_path.rglob("*.jsonl"))
    with session_scope(engine) as s:
        assert registry.list_datasets(s) == []


def rewards(model_dir: Path, prompts: list[tuple[tuple, str | None, list]]) -> list[dict[str, float]]:
    """The model's rewards through the trainer's path (cheems.chat + cheems.forward), not the scorer's."""
    model, tokenizer = load_model(model_dir)
    out = []
    for (prompt, responses), system, history in prompts:
        conversations = [Conversation(prompt, c, system, tuple(history)) for _, c in responses]
        with torch.no_grad():
            values = [forward_rewards(model, [e.input_ids]).item() for e in encode_many(tokenizer, conversations)]
        out.append({rid: v for (rid, _), v in zip(responses, values, strict=True)})
    return out


def registered(engine: Engine, dataset_id: str, path: Path) -> str:
    """A model trained on the dataset, registered; its id."""
    with session_scope(engine) as s:
        training = registry.create_training(s, dataset_id, "tiny-cpu", {}, "local", "out/{id}")
        model, _ = registry.register_model(s, training.id, str(path), None)
        return str(model.id)


def test_distant_supervision_waits_for_a_human_trained_model_and_uses_only_one(
    engine: Engine, tiny_model: Path, tmp_path: Path
) -> None:
    ids = seed(engine)
    options = DatasetOptions(str(tmp_path))
    with pytest.raises(NoSupervisor, match=r"ai-distant waits: .* trained on human rankings only"):
        create_dataset(engine, "ai-distant", options)  # no model yet: no AI relation enters unfiltered
    ai_model = registered(engine, create_dataset(engine, "ai", options)[0].id, tiny_model)
    with pytest.raises(NoSupervisor):  # a model trained on AI annotations never supervises, however good
        create_dataset(engine, "ai-distant", options)
    with pytest.raises(InvalidInput, match=rf"supervisor .{ai_model}. is not .* those are: none yet"):
        create_dataset(engine, "ai-distant", options, supervisor_id=ai_model)
    with session_scope(engine) as s:
        assert [d.recipe for d in registry.list_datasets(s)] == ["ai"]  # the waiting recipe stored nothing
    model_id = registered(engine, create_dataset(engine, "human", options)[0].id, tiny_model)
    with pytest.raises(InvalidInput, match=rf"supervisor .rm-nobody. is not .* those are: {model_id}"):
        create_dataset(engine, "ai-distant", options, supervisor_id="rm-nobody")
    expected = {}
    jia, yi = rewards(tiny_model, [(JIA, "你是助手", []), (YI, None, HISTORY)])
    if jia["c"] >= jia["a"]:
        expected[JIA[0]] = [["c", "a", "1"]]
    if yi["x"] >= yi["y"]:
        expected[YI[0]] = [["x", "y", "1"]]
    assert ids  # the prompts are stored
    if not expected:
        with pytest.raises(EmptyDataset):
            create_dataset(engine, "ai-distant", options)
        return
    filtered, _ = create_dataset(engine, "ai-distant", options)
    assert filtered.supervisor_model_id == model_id
    assert {k: v["annotations"] for k, v in lines(filtered.path).items()} == expected
    assert filtered.details is not None
    assert filtered.details["settings"] == {
        "distant_supervision": {"supervisor_model_id": model_id, "margin": 0.0, "tie_margin": None,
                                "score_max_length": 2048}}  # fmt: skip
    assert filtered.details["counts"]["ai_relations"] == 2
    assert filtered.details["counts"]["ai_relations_dropped_by_distant_supervision"] == 2 - len(expected)


def test_the_paper_recipe_records_every_step_it_ran() -> None:
    options = DatasetOptions("out", seed=7, score_max_length=512, distant=DistantSettings(0.5, 1.0))
    details = dataset_details(dataset_recipe(PAPER_RECIPE), options, "rm-1", DatasetStats(pairs=3))
    assert details["recipe"] == PAPER_RECIPE and details["counts"]["pairs"] == 3
    assert details["settings"] == {
        "distant_supervision": {"supervisor_model_id": "rm-1", "margin": 0.5, "tie_margin": 1.0,
                                "score_max_length": 512},
        "length_debias": {"applies_to": "ai", "seed": 7},
    }  # fmt: skip
    json.dumps(details)  # stored in a JSON column, shown as JSON
    supervision = DatasetOptions("out", score_max_length=512, score_device="cpu", score_dtype="bfloat16").scoring
    assert (supervision.device, supervision.dtype, supervision.max_length) == ("cpu", "bfloat16", 512)
