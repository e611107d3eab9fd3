"""The pre-parse look at serialized requests: it finds what protobuf would find, without parsing."""

from __future__ import annotations

from cheems.v1 import common_pb2, reward_pb2
from services.scorer.wire import LAYOUTS, oversized_text


def request(**fields: object) -> reward_pb2.ScoreRequest:
    values: dict[str, object] = {"prompt": "你好", "responses": ["好", "不好"], "request_id": "r" * 500, **fields}
    return reward_pb2.ScoreRequest(**values)  # type: ignore[arg-type]


def test_the_field_numbers_are_the_protos() -> None:
    for message, module in (("ScoreRequest", reward_pb2), ("ScoreBatchRequest", reward_pb2), ("Message", common_pb2)):
        fields = getattr(module, message).DESCRIPTOR.fields_by_number
        for number, (name, nested) in LAYOUTS[message].items():
            assert fields[number].name == name
            assert (fields[number].message_type.name if fields[number].message_type else None) == nested


def test_names_the_first_field_over_the_limit() -> None:
    assert oversized_text(request().SerializeToString(), "ScoreRequest", 100) is None  # request_id is not text to score
    big = request(responses=["好", "长" * 40]).SerializeToString()
    assert oversized_text(big, "ScoreRequest", 100) == ("responses[1]", 120)
    history = request(
        history=[common_pb2.Message(role="user", content="x"), common_pb2.Message(role="user", content="y" * 101)]
    )
    assert oversized_text(history.SerializeToString(), "ScoreRequest", 100) == ("history[1].content", 101)
    assert oversized_text(request(system_prompt="s" * 101).SerializeToString(), "ScoreRequest", 100) == (
        "system_prompt",
        101,
    )


def test_looks_inside_batch_items() -> None:
    batch = reward_pb2.ScoreBatchRequest(items=[request(), request(prompt="问" * 50)])
    assert oversized_text(batch.SerializeToString(), "ScoreBatchRequest", 100) == ("items[1].prompt", 150)
    assert oversized_text(batch.SerializeToString(), "ScoreBatchRequest", 1000) is None


def test_malformed_bytes_are_left_to_the_parser() -> None:
    good = request(responses=["长" * 40]).SerializeToString()
    for bad in (good[:20], b"\xff" * 20, b"\x0b\x00"):
        assert oversized_text(bad, "ScoreRequest", 100) is None
