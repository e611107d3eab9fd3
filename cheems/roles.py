"""Accounts' roles and who may call what: one meaning on every service, gRPC and HTTP alike.

    may(ADMIN, "/cheems.v1.TrainingService/PromoteModel")      # True
    needed("/cheems.v1.TrainingService/PromoteModel")          # frozenset({"admin"})
    Caller("张三", ANNOTATOR).actor                              # "person:张三": what the lifecycle records

Every call that changes state names an account (a bearer token, checked by the service against the store's
accounts, or the scorer's static token); its role decides what it may do, and who did a thing is read from the
credential, never from the request. The roles:

    annotator      lists (and is assigned) their own tasks, annotates each once (gRPC and the annotator's page)
    operator       ingests, makes tasks and datasets, reassigns tasks and voids annotations, starts and cancels
                   trainings and evaluation runs, registers and rejects models, reads everything
    admin          all an operator may, and promotes and rolls back models, annotates, sees the annotation overview
    service        what one service needs of another: scoring, listing tasks, submitting AI annotations of pair tasks
                   under its own name and closing a pair it cannot decide (an AI judge)
    scorer-client  Score, ScoreBatch and GetModelInfo only (an RLHF job, the eval workers)

A method missing from PERMISSIONS may be called by nobody (a test checks that every method of every cheems.v1
service is in it). Health and reflection are not guarded at all (`services.access.OPEN`).
"""

from __future__ import annotations

from dataclasses import dataclass

ANNOTATOR = "annotator"
OPERATOR = "operator"
ADMIN = "admin"
SERVICE = "service"
SCORER_CLIENT = "scorer-client"
ROLES = (ANNOTATOR, OPERATOR, ADMIN, SERVICE, SCORER_CLIENT)
PEOPLE = (ANNOTATOR, OPERATOR, ADMIN)  # accounts of persons: their actor is person:NAME

# what each kind of work needs
ANNOTATE = frozenset({ANNOTATOR, ADMIN})  # as oneself (a service: AI annotations of its judge)
OPERATE = frozenset({OPERATOR, ADMIN})
DECIDE = frozenset({ADMIN})  # which model is production
SCORE = frozenset({SCORER_CLIENT, SERVICE, OPERATOR, ADMIN})


def _methods(service: str, roles: frozenset[str], *names: str) -> dict[str, frozenset[str]]:
    return {f"/cheems.v1.{service}/{name}": roles for name in names}


PERMISSIONS: dict[str, frozenset[str]] = {
    **_methods("IngestionService", OPERATE, "Ingest", "GetSample"),
    **_methods(
        "AnnotationService", OPERATE, "CreateTasks", "Resolve", "GetRanking", "Export", "ReassignTask", "VoidAnnotation"
    ),
    **_methods("AnnotationService", ANNOTATE | {SERVICE}, "SubmitAnnotation"),
    **_methods("AnnotationService", frozenset({SERVICE}), "CloseTask"),  # an AI judge's undecidable pair
    **_methods("AnnotationService", ANNOTATE | OPERATE | {SERVICE}, "ListTasks"),
    **_methods(
        "TrainingService",
        OPERATE,
        "CreateDataset",
        "ListDatasets",
        "StartTraining",
        "GetTraining",
        "ListTrainings",
        "CancelTraining",
        "ListModels",
        "RegisterModel",
        "RejectModel",
    ),
    **_methods("TrainingService", DECIDE, "PromoteModel", "RollbackModel"),
    **_methods("EvaluationService", OPERATE, "StartRun", "GetRun"),
    **_methods("RewardService", SCORE, "Score", "ScoreBatch", "GetModelInfo"),
}


def needed(method: str) -> frozenset[str]:
    """The roles that may call `method` ("/package.Service/Method"); empty: nobody may."""
    return PERMISSIONS.get(method, frozenset())


def may(role: str, method: str) -> bool:
    return role in needed(method)


def spelled(roles: frozenset[str]) -> str:
    """`roles` as a message names them, in ROLES' order: "operator or admin", "operator, admin or service"."""
    names = [r for r in ROLES if r in roles]
    if len(names) < 2:
        return names[0] if names else "no role"
    return f"{', '.join(names[:-1])} or {names[-1]}"


@dataclass(frozen=True)
class Caller:
    """The account a call came from: its name and role (never its token)."""

    name: str
    role: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {self.role!r}")

    @property
    def actor(self) -> str:
        """Who did it, as the model lifecycle and the trainings record it: person:NAME or service:NAME."""
        return f"{'person' if self.role in PEOPLE else 'service'}:{self.name}"
