"""Topic names (versioned) and the protobuf payload each one carries. Keys are prompt ids."""

from __future__ import annotations

from google.protobuf.message import Message

from cheems.v1 import events_pb2

SCHEMA_VERSION = 1
SAMPLES = "cheems.samples.v1"
ANNOTATIONS = "cheems.annotations.v1"
RANKINGS = "cheems.rankings.v1"
SCORE_REQUESTS = "cheems.score-requests.v1"
SCORES = "cheems.scores.v1"
EVAL_RESULTS = "cheems.eval-results.v1"

PAYLOADS: dict[str, type[Message]] = {
    SAMPLES: events_pb2.SampleEvent,
    ANNOTATIONS: events_pb2.AnnotationEvent,
    RANKINGS: events_pb2.RankingEvent,
    SCORE_REQUESTS: events_pb2.ScoreRequestEvent,
    SCORES: events_pb2.ScoreEvent,
    EVAL_RESULTS: events_pb2.EvalResultEvent,
}
ALL = tuple(PAYLOADS)


def dead_letter(topic: str) -> str:
    """Where undecodable messages of `topic` go."""
    return f"{topic}.dlq"
