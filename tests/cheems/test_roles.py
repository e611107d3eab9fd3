"""Who may call what (`cheems.roles`): every method of every cheems.v1 service has its roles, and nothing else is
listed; the roles read as the issue defines them; a caller's actor is person:NAME or service:NAME."""

from __future__ import annotations

import pytest

from cheems import roles
from cheems.roles import ADMIN, ANNOTATOR, OPERATOR, SCORER_CLIENT, SERVICE, Caller, may, needed, spelled
from cheems.v1 import annotation_pb2, evaluation_pb2, ingestion_pb2, reward_pb2, training_pb2

FILES = (annotation_pb2, evaluation_pb2, ingestion_pb2, reward_pb2, training_pb2)


def every_method() -> set[str]:
    return {
        f"/{service.full_name}/{method.name}"
        for module in FILES
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }


def test_every_door_has_a_lock_and_no_lock_is_on_a_wall() -> None:
    assert set(roles.PERMISSIONS) == every_method()
    assert all(roles.PERMISSIONS.values())  # no method that nobody may call


@pytest.mark.parametrize(
    ("role", "may_call", "may_not_call"),
    [
        (ANNOTATOR, ["AnnotationService/ListTasks", "AnnotationService/SubmitAnnotation"],
         ["IngestionService/Ingest", "AnnotationService/CreateTasks", "TrainingService/StartTraining",
          "RewardService/Score", "EvaluationService/StartRun"]),
        (OPERATOR, ["IngestionService/Ingest", "TrainingService/CreateDataset", "TrainingService/StartTraining",
                    "TrainingService/CancelTraining", "EvaluationService/StartRun", "TrainingService/RegisterModel",
                    "TrainingService/RejectModel", "RewardService/Score"],
         ["TrainingService/PromoteModel", "TrainingService/RollbackModel", "AnnotationService/SubmitAnnotation"]),
        (ADMIN, sorted(m.split("cheems.v1.")[1] for m in every_method()), []),
        (SERVICE, ["AnnotationService/SubmitAnnotation", "AnnotationService/ListTasks", "RewardService/Score",
                   "RewardService/ScoreBatch"],
         ["IngestionService/Ingest", "TrainingService/PromoteModel", "TrainingService/RegisterModel"]),
        (SCORER_CLIENT, ["RewardService/Score", "RewardService/ScoreBatch", "RewardService/GetModelInfo"],
         ["AnnotationService/ListTasks", "IngestionService/GetSample", "TrainingService/ListModels"]),
    ],
)  # fmt: skip
def test_what_each_role_may_do(role: str, may_call: list[str], may_not_call: list[str]) -> None:
    assert [m for m in may_call if not may(role, f"/cheems.v1.{m}")] == []
    assert [m for m in may_not_call if may(role, f"/cheems.v1.{m}")] == []


def test_the_words_of_a_refusal_and_the_actor() -> None:
    assert spelled(needed("/cheems.v1.TrainingService/PromoteModel")) == "admin"
    assert spelled(needed("/cheems.v1.IngestionService/Ingest")) == "operator or admin"
    assert spelled(needed("/cheems.v1.AnnotationService/ListTasks")) == "annotator, operator, admin or service"
    assert needed("/cheems.v1.Nothing/Here") == frozenset() and spelled(frozenset()) == "no role"
    assert Caller("张三", ANNOTATOR).actor == "person:张三" and Caller("etl", OPERATOR).actor == "person:etl"
    assert Caller("eval-worker", SERVICE).actor == "service:eval-worker"
    with pytest.raises(ValueError, match="role must be one of"):
        Caller("x", "root")
