"""The score worker's batches without I/O: chunks, replies matched to requests, which scorer errors are refusals."""

from __future__ import annotations

import grpc
import pytest

from cheems.v1 import events_pb2, reward_pb2
from evaluator.pipeline.score_batch import match_replies, one_by_one, refused, score_event
from services.bus import topics
from services.bus.client import Delivery
from services.scorer.client import chunks

Code = grpc.StatusCode


def request(key: str, model_id: str = "") -> Delivery:
    event = events_pb2.ScoreRequestEvent(
        header=events_pb2.EventHeader(event_id=f"run-1/{key}"), run_id="run-1", subset="open", prompt_id=key,
        response_ids=["r1", "r2"], request=reward_pb2.ScoreRequest(prompt="你好", responses=["甲", "乙"]),
        model_id=model_id,
    )  # fmt: skip
    return Delivery(topics.SCORE_REQUESTS, key, event)


def reply(model: str, *scores: float) -> reward_pb2.ScoreResponse:
    return reward_pb2.ScoreResponse(scores=scores, model=model)


def test_chunks_keep_the_order_and_the_size() -> None:
    assert chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert chunks([], 3) == []


def test_a_reply_from_another_model_sends_its_request_to_wait_for_the_runs_model() -> None:
    plain, wanted, other = request("open:0"), request("open:1", "rm-a"), request("open:2", "rm-b")
    answered, waiting = match_replies([plain, wanted, other], [reply("rm-a", 1, 2), reply("rm-a", 3, 4), reply("rm-a")])
    assert [(d.key, list(r.scores)) for d, r in answered] == [("open:0", [1, 2]), ("open:1", [3, 4])]
    assert waiting == [other]
    with pytest.raises(ValueError, match="2 items for 3 requests"):
        match_replies([plain, wanted, other], [reply("rm-a"), reply("rm-a")])


@pytest.mark.parametrize(
    ("code", "reason", "is_refusal", "asked_one_by_one"),
    [
        (Code.INVALID_ARGUMENT, "invalid_request", True, True),  # an empty prompt, say
        (Code.RESOURCE_EXHAUSTED, "limit_exceeded", True, True),  # too long, or too many items for one call
        (Code.OUT_OF_RANGE, "", True, True),
        (Code.RESOURCE_EXHAUSTED, "overloaded", False, False),  # passes: the worker raises, the batch is redelivered
        (Code.UNAVAILABLE, "", False, False),
        (Code.DEADLINE_EXCEEDED, "", False, False),
        (Code.INTERNAL, "", False, False),
        (Code.UNIMPLEMENTED, "", False, True),  # a scorer without ScoreBatch
    ],
)
def test_which_scorer_errors_refuse_a_request(
    code: grpc.StatusCode, reason: str, is_refusal: bool, asked_one_by_one: bool
) -> None:
    assert refused(code, reason) is is_refusal
    assert one_by_one(code, reason) is asked_one_by_one


def test_a_score_event_answers_its_request() -> None:
    event = score_event(request("open:3").event, [0.5, -1.0], "rm-a")
    assert (event.header.event_id, event.run_id, event.prompt_id) == ("run-1/open:3", "run-1", "open:3")
    assert (list(event.response_ids), list(event.scores), event.model_id, event.error) == (
        ["r1", "r2"],
        [0.5, -1.0],
        "rm-a",
        "",
    )
    assert score_event(request("open:3").event, error="why").error == "why"
