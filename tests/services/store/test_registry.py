"""The training registry: datasets by content hash, trainings and their progress, models, the best model."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from services.store import registry, repository
from services.store.db import session_scope
from services.store.errors import InvalidRecord, UnknownDataset, UnknownTraining

SHA = "a" * 64


def test_datasets_trainings_and_models(engine: Engine) -> None:
    with session_scope(engine) as session:
        assert registry.rankings_since_last_dataset(session) == 0
        pid, _ = repository.add_sample(session, "你好", [("a", "好"), ("b", "坏")], ["闲聊"])
        repository.save_ranking(session, pid, {"a": 1, "b": 2}, 0, 0)
    with session_scope(engine) as session:
        assert registry.rankings_since_last_dataset(session) == 1
        _, created = registry.add_dataset(session, SHA, "human", "d.jsonl", 1, 1, 1)
        assert created
        assert registry.add_dataset(session, SHA, "human", "d.jsonl", 1, 1, 1)[1] is False  # same content
    with session_scope(engine) as session:
        assert registry.rankings_since_last_dataset(session) == 0
        training = registry.create_training(session, SHA, "tiny-cpu", {"epochs": "2"}, "local", "out/{id}")
        training_id = training.id
        assert training.out_dir == f"out/{training_id}" and training.state == "pending"
    with session_scope(engine) as session:
        registry.update_training(session, training_id, state="running", step=3, total_steps=10, loss=0.5)
    with session_scope(engine) as session:
        model, created = registry.register_model(session, training_id, f"out/{training_id}/model", 0.7)
        assert created and model.id == f"rm-{training_id}"
        assert registry.register_model(session, training_id, "elsewhere", None)[1] is False
    with session_scope(engine) as session:
        training = registry.get_training(session, training_id)
        assert (training.state, training.model_id, training.step, training.loss) == ("succeeded", model.id, 3, 0.5)
        registry.update_training(session, training_id, state="failed")  # an ended training keeps its state
        assert registry.get_training(session, training_id).state == "succeeded"
        assert [m.id for m in registry.list_models(session)] == [model.id]
        assert registry.best_model(session).id == model.id  # type: ignore[union-attr]


def test_the_best_model_is_the_best_evaluated(engine: Engine) -> None:
    with session_scope(engine) as session:
        registry.add_dataset(session, SHA, "human", "d.jsonl", 1, 1, 1)
        ids = []
        for _ in range(2):
            training = registry.create_training(session, SHA, "tiny-cpu", {}, "local", "out/{id}")
            ids.append(registry.register_model(session, training.id, "m", None)[0].id)
        for model_id, overall in zip(ids, (0.8, 0.6), strict=True):
            run = repository.create_run(session, ["open.jsonl"], "s:1", "paper", 5, 1, model_id=model_id)
            repository.end_run(session, run, {"overall": overall})
    with session_scope(engine) as session:
        assert registry.best_model(session).id == ids[0]  # type: ignore[union-attr]


def test_bad_references_and_fields(engine: Engine) -> None:
    with session_scope(engine) as session, pytest.raises(UnknownDataset):
        registry.create_training(session, SHA, "tiny-cpu", {}, "local", "o")
    with session_scope(engine) as session, pytest.raises(UnknownTraining):
        registry.get_training(session, "nope")
    with session_scope(engine) as session, pytest.raises(InvalidRecord, match="launcher"):
        registry.add_dataset(session, SHA, "human", "d.jsonl", 1, 1, 1)
        registry.create_training(session, SHA, "tiny-cpu", {}, "slurm", "o")
    with session_scope(engine) as session, pytest.raises(InvalidRecord, match="not a progress field"):
        registry.add_dataset(session, SHA, "human", "d.jsonl", 1, 1, 1)
        training = registry.create_training(session, SHA, "tiny-cpu", {}, "local", "o")
        registry.update_training(session, training.id, path="x")
