"""The ablation runner against a stand-in training service: the requests it makes (human first, its model as the
distant recipes' supervisor, eval_files and seed set), a recipe the service cannot make a dataset of becomes a
row with the reason, a failed supervisor fails its distant recipes, a refusal for all and a service away raise,
and figures come from the model's metadata (the training's Overall alone when that is not readable).
The end-to-end run over a real store and real trainings is tests/cheems_cli/test_ablation.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from cheems.errors import InvalidInput, Unavailable
from cheems.v1 import training_pb2
from trainer.ablation import AblationConfig
from trainer.service.ablation import run_ablation
from trainer.service.progress import METADATA

State = training_pb2.TrainingState


class Refused(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return (("cheems-error-reason", "empty_dataset"),)


def final_eval(overall: float) -> dict[str, Any]:
    metrics = {"ece": None, "per_category": {}, "prompts": 3, "pairs": 9}
    return {
        "semantics": "paper",
        "overall": overall,
        "subsets": {"human": {"accuracy": overall, "exact_match": overall / 2, **metrics}},
    }


class FakeService:
    """Datasets and trainings in memory; a training ends at its second GetTraining."""

    def __init__(self, root: Path, empty: tuple[str, ...] = (), fail: tuple[str, ...] = ()) -> None:
        self.root, self.empty, self.fail = root, empty, fail
        self.datasets: list[Any] = []
        self.starts: list[Any] = []
        self.polls: dict[str, int] = {}
        self.models: list[training_pb2.Model] = []
        self.down = False
        self.metadata = True  # write the model's cheems_metadata.json

    def CreateDataset(self, request: Any, timeout: float | None = None) -> training_pb2.Dataset:
        self.datasets.append(request)
        if self.down:
            raise Refused(grpc.StatusCode.UNAVAILABLE, "connection refused")
        if request.recipe in self.empty:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, f"dataset recipe {request.recipe}: no preference pair")
        return training_pb2.Dataset(
            dataset_id=f"ds-{request.recipe}", recipe=request.recipe, pairs=7, supervisor_model_id=request.supervisor
        )

    def StartTraining(self, request: Any, timeout: float | None = None) -> training_pb2.Training:
        if "epoch" in request.overrides:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "overrides: --set 'epoch=1': expected key=value")
        self.starts.append(request)
        training_id = f"t{len(self.starts)}"
        return training_pb2.Training(training_id=training_id, state=State.TRAINING_STATE_RUNNING)

    def GetTraining(self, request: Any, timeout: float | None = None) -> training_pb2.Training:
        training_id = request.training_id
        self.polls[training_id] = self.polls.get(training_id, 0) + 1
        if self.polls[training_id] < 2:
            return training_pb2.Training(training_id=training_id, state=State.TRAINING_STATE_RUNNING)
        recipe = self.starts[int(training_id[1:]) - 1].dataset_id.removeprefix("ds-")
        if recipe in self.fail:
            return training_pb2.Training(training_id=training_id, state=State.TRAINING_STATE_FAILED, error="boom\nOOM")
        path = self.root / training_id / "model"
        path.mkdir(parents=True, exist_ok=True)
        overall = 0.5 + 0.1 * len(self.models)
        if self.metadata:
            (path / METADATA).write_text(json.dumps({"final_eval": final_eval(overall)}), encoding="utf-8")
        model_id = f"rm-{training_id}"
        self.models.append(training_pb2.Model(model_id=model_id, path=str(path)))
        done = training_pb2.Training(training_id=training_id, state=State.TRAINING_STATE_SUCCEEDED, model_id=model_id)
        done.overall = overall
        return done

    def ListModels(self, request: Any, timeout: float | None = None) -> training_pb2.ListModelsResponse:
        return training_pb2.ListModelsResponse(models=self.models)


def config(**fields: Any) -> AblationConfig:
    return AblationConfig(**{"bench": ("/b/human.jsonl",), "poll_seconds": 0.01, **fields})


def test_human_first_then_its_model_supervises_the_distant_recipes(tmp_path: Path) -> None:
    service = FakeService(tmp_path)
    heard: list[str] = []
    runs = run_ablation(service, config(recipes=("ai-distant", "ai"), seeds=(3,)), heard.append)
    assert [(d.recipe, d.supervisor) for d in service.datasets] == [("human", ""), ("ai-distant", "rm-t1"), ("ai", "")]
    assert [s.dataset_id for s in service.starts] == ["ds-human", "ds-ai-distant", "ds-ai"]
    assert all(dict(s.overrides) == {"eval_files": '["/b/human.jsonl"]', "seed": "3"} for s in service.starts)
    assert [(r.recipe, r.seed, r.model_id, r.pairs) for r in runs] == [
        ("human", 3, "rm-t1", 7),
        ("ai-distant", 3, "rm-t2", 7),
        ("ai", 3, "rm-t3", 7),
    ]
    assert runs[1].supervisor == "rm-t1" and all(r.ok for r in runs)
    assert [r.overall for r in runs] == pytest.approx([0.5, 0.6, 0.7])
    assert runs[2].subsets["human"].exact_match == pytest.approx(0.35)
    assert heard[-1] == "ai (seed 3): Overall 0.7000"


def test_each_seed_has_its_own_supervisor(tmp_path: Path) -> None:
    service = FakeService(tmp_path)
    runs = run_ablation(service, config(recipes=("human", "ai-distant"), seeds=(0, 1)))
    assert [(d.recipe, d.supervisor) for d in service.datasets] == [
        ("human", ""),
        ("ai-distant", "rm-t1"),
        ("human", ""),
        ("ai-distant", "rm-t3"),
    ]
    assert [s.overrides["seed"] for s in service.starts] == ["0", "0", "1", "1"]
    assert [r.seed for r in runs] == [0, 0, 1, 1]


def test_a_recipe_without_pairs_is_a_run_saying_why(tmp_path: Path) -> None:
    service = FakeService(tmp_path, empty=("ai",))
    human, ai, debias = run_ablation(service, config(recipes=("human", "ai", "ai-debias")))
    assert human.ok and debias.ok
    assert not ai.ok and ai.error == "dataset recipe ai: no preference pair" and ai.training_id == ""
    assert [s.dataset_id for s in service.starts] == ["ds-human", "ds-ai-debias"]


def test_a_failed_supervisor_fails_the_distant_recipes_only(tmp_path: Path) -> None:
    service = FakeService(tmp_path, fail=("human",))
    human, distant, ai = run_ablation(service, config(recipes=("human", "ai-distant", "ai")))
    assert human.error == "training t1 failed: boom\nOOM" and human.dataset_id == "ds-human"
    assert distant.error.startswith("no supervisor: the human recipe's model (seed 0) failed: training t1 failed")
    assert ai.ok and [d.recipe for d in service.datasets] == ["human", "ai"]


def test_unreadable_metadata_keeps_the_trainings_overall(tmp_path: Path) -> None:
    service = FakeService(tmp_path)
    service.metadata = False
    (run,) = run_ablation(service, config(recipes=("ai",)))
    assert run.ok and run.overall == pytest.approx(0.5) and dict(run.subsets) == {}
    assert run.note.startswith("per-subset figures not readable here (model at ")


def test_a_refusal_for_every_recipe_and_a_service_away_raise(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="refused the training: overrides: --set 'epoch=1'"):
        run_ablation(FakeService(tmp_path), config(recipes=("ai",), overrides={"epoch": "1"}))
    away = FakeService(tmp_path)
    away.down = True
    with pytest.raises(Unavailable, match=r"CreateDataset\(ai\): UNAVAILABLE connection refused"):
        run_ablation(away, config(recipes=("ai",)))


class NeverEnds(FakeService):
    """Its trainings run until cancelled."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cancelled: set[str] = set()

    def GetTraining(self, request: Any, timeout: float | None = None) -> training_pb2.Training:
        state = (
            State.TRAINING_STATE_CANCELLED if request.training_id in self.cancelled else State.TRAINING_STATE_RUNNING
        )
        return training_pb2.Training(training_id=request.training_id, state=state)

    def CancelTraining(self, request: Any, timeout: float | None = None) -> training_pb2.Training:
        self.cancelled.add(request.training_id)
        return training_pb2.Training(training_id=request.training_id, state=State.TRAINING_STATE_CANCELLED)


def test_a_training_over_the_timeout_is_cancelled_and_says_so(tmp_path: Path) -> None:
    service = NeverEnds(tmp_path)
    (run,) = run_ablation(service, config(recipes=("ai",), timeout=0.05))
    assert service.cancelled == {"t1"}
    assert run.error == "training t1 cancelled: cancelled after --timeout 0.05 s"
