"""Who may call what (`cheems.roles`): every method of every cheems.v1 service has its roles, and nothing else is
listed; the roles read as the issue defines them; a caller's actor is person:NAME or service:NAME; the README's
table is the code's."""

from __future__ import annotations

import re
from pathlib import Path

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
          "RewardService/Score", "EvaluationService/StartRun", "AnnotationService/ReassignTask",
          "AnnotationService/VoidAnnotation", "AnnotationService/CloseTask"]),
        (OPERATOR, ["IngestionService/Ingest", "TrainingService/CreateDataset", "TrainingService/StartTraining",
                    "TrainingService/CancelTraining", "EvaluationService/StartRun", "TrainingService/RegisterModel",
                    "TrainingService/RejectModel", "RewardService/Score", "AnnotationService/ReassignTask",
                    "AnnotationService/VoidAnnotation"],
         ["TrainingService/PromoteModel", "TrainingService/RollbackModel", "AnnotationService/SubmitAnnotation",
          "AnnotationService/CloseTask"]),
        # an admin may do all but close an AI judge's pair without a verdict (a service account's work)
        (ADMIN, sorted(m.split("cheems.v1.")[1] for m in every_method() - {"/cheems.v1.AnnotationService/CloseTask"}),
         ["AnnotationService/CloseTask"]),
        (SERVICE, ["AnnotationService/SubmitAnnotation", "AnnotationService/ListTasks", "AnnotationService/CloseTask",
                   "RewardService/Score", "RewardService/ScoreBatch"],
         ["IngestionService/Ingest", "TrainingService/PromoteModel", "TrainingService/RegisterModel",
          "AnnotationService/ReassignTask", "AnnotationService/VoidAnnotation"]),
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


def test_the_readme_table_says_what_the_code_does() -> None:
    """docs/accounts.md: each row names a service and methods, and ticks the roles that may call them."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "accounts.md").read_text(encoding="utf-8")
    section = readme.split("# Accounts and roles", 1)[1].split("\n## ", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("| RPC |"))
    columns = [c.strip() for c in header.strip("|").split("|")][1:]
    documented: dict[str, frozenset[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `") or "Service" not in line.split("|")[1]:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        first = cells[0].split("(")[0]
        service = re.search(r"`(\w+Service)", first).group(1)  # type: ignore[union-attr]
        methods = re.findall(r"\.(\w+)`", first) or re.findall(r"(\w+)", first.split(":", 1)[1])
        ticked = frozenset(role for role, cell in zip(columns, cells[1:], strict=True) if cell == "✓")
        documented |= {f"/cheems.v1.{service}/{m}": ticked for m in methods}
    assert documented == roles.PERMISSIONS
