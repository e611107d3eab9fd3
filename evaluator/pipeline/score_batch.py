"""The score worker's batches, without I/O: which requests share a ScoreBatch call, which replies can be
published, which requests must wait for their run's model, and which scorer errors refuse a request for good.

    for chunk in chunks(deliveries, config.call_items):
        replies = client.score_batch([d.event.request for d in chunk])
        answered, waiting = match_replies(chunk, replies)

A reply answers its request unless the request's run evaluates a registered model (`model_id`) and
the reply names another; those requests go back to the worker's one-by-one path, which waits for the
scorer to switch (`evaluator.pipeline.worker`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc

from cheems.v1 import events_pb2, reward_pb2
from services.bus.client import Delivery

# what the scorer answers for a request it will never score, however often it is asked
REFUSALS = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED)
MODEL_NOT_FOUND = "model_not_found"  # the scorer's reason for a model it does not serve
OVERLOADED = "overloaded"  # the `cheems-error-reason` of a RESOURCE_EXHAUSTED that passes (the client retries it)


def match_replies(
    chunk: Sequence[Delivery], replies: Sequence[reward_pb2.ScoreResponse]
) -> tuple[list[tuple[Delivery, reward_pb2.ScoreResponse]], list[Delivery]]:
    """(request, reply) pairs to publish, and the requests whose run wants another model than the reply's."""
    if len(replies) != len(chunk):
        raise ValueError(f"the scorer answered {len(replies)} items for {len(chunk)} requests")
    answered, waiting = [], []
    for delivery, reply in zip(chunk, replies, strict=True):
        wanted = delivery.event.model_id
        if wanted and reply.model != wanted:
            waiting.append(delivery)
        else:
            answered.append((delivery, reply))
    return answered, waiting


def refused(code: grpc.StatusCode | None, reason: str) -> bool:
    """The scorer refuses the request itself (bad or over a limit): asking again would fail the same way."""
    return code in REFUSALS and not (code is grpc.StatusCode.RESOURCE_EXHAUSTED and reason == OVERLOADED)


def model_not_served(code: grpc.StatusCode | None, reason: str) -> bool:
    """The scorer does not serve the model a request names (not loaded there, unknown, rejected, retired)."""
    return code is grpc.StatusCode.NOT_FOUND and reason == MODEL_NOT_FOUND


def one_by_one(code: grpc.StatusCode | None, reason: str) -> bool:
    """A ScoreBatch call failed in a way that asking for its requests one by one can get past: a refusal
    (of one request, or of the call's size), a model the scorer does not serve (each request then waits
    for it on its own), or a scorer without ScoreBatch."""
    return refused(code, reason) or model_not_served(code, reason) or code is grpc.StatusCode.UNIMPLEMENTED


def score_event(
    request: Any, scores: list[float] | None = None, model_id: str = "", error: str = ""
) -> events_pb2.ScoreEvent:
    """The answer to a ScoreRequestEvent: its scores and the model that gave them, or why there are none."""
    return events_pb2.ScoreEvent(
        header=events_pb2.EventHeader(event_id=request.header.event_id, producer="worker"),
        run_id=request.run_id,
        subset=request.subset,
        prompt_id=request.prompt_id,
        response_ids=request.response_ids,
        scores=scores or [],
        model_id=model_id,
        error=error,
    )
