"""The one schema: generated modules are current, and the contracts other tools rely on hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheems import protogen


def test_generated_modules_are_not_stale(tmp_path: Path) -> None:
    """Fails when a .proto changed but `make proto` was not run (or generated code was hand-edited)."""
    fresh = protogen.generate(tmp_path)
    assert fresh, "protoc generated nothing"
    here = protogen.PROTO_ROOT.parent
    for path in fresh:
        current = here / path.relative_to(tmp_path)
        assert current.exists(), f"{current} missing: run `make proto`"
        assert current.read_bytes() == path.read_bytes(), f"{current} is stale: run `make proto`"
    generated_here = {p.relative_to(here) for p in (here / "cheems" / "v1").glob("*_pb2*.py*")}
    assert generated_here == {p.relative_to(tmp_path) for p in fresh}, "leftover modules of a deleted proto"


def test_reward_service_contract() -> None:
    from cheems.v1 import reward_pb2

    service = reward_pb2.DESCRIPTOR.services_by_name["RewardService"]
    assert service.full_name == "cheems.v1.RewardService"
    score = service.methods_by_name["Score"]
    assert (score.input_type.full_name, score.output_type.full_name) == (
        "cheems.v1.ScoreRequest",
        "cheems.v1.ScoreResponse",
    )
    request = reward_pb2.ScoreRequest.DESCRIPTOR.fields_by_name
    assert (request["prompt"].number, request["responses"].number) == (1, 2)
    assert request["responses"].is_repeated
    scores = reward_pb2.ScoreResponse.DESCRIPTOR.fields_by_name["scores"]
    assert scores.number == 1 and scores.is_repeated and scores.type == scores.TYPE_FLOAT


@pytest.mark.parametrize(
    ("module", "service"),
    [
        ("reward_pb2", "RewardService"),
        ("ingestion_pb2", "IngestionService"),
        ("annotation_pb2", "AnnotationService"),
        ("evaluation_pb2", "EvaluationService"),
    ],
)
def test_every_service_is_in_package_cheems_v1(module: str, service: str) -> None:
    import importlib

    descriptor = importlib.import_module(f"cheems.v1.{module}").DESCRIPTOR
    assert descriptor.package == "cheems.v1"
    assert descriptor.services_by_name[service].methods


def test_event_payloads_round_trip_with_chinese_text() -> None:
    from cheems.v1 import common_pb2, events_pb2, reward_pb2

    event = events_pb2.ScoreRequestEvent(
        run_id="run-1",
        subset="open",
        prompt_id="p1",
        response_ids=["a", "b"],
        request=reward_pb2.ScoreRequest(
            prompt="你好",
            responses=["很好。", "不好。"],
            history=[common_pb2.Message(role="user", content="在吗？")],
        ),
    )
    event.header.schema_version = 1
    decoded = events_pb2.ScoreRequestEvent.FromString(event.SerializeToString())
    assert decoded == event and decoded.request.responses[0] == "很好。"
