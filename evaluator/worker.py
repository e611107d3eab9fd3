"""The score worker: score requests from Kafka -> the scorer's RewardService over gRPC -> scores to Kafka.

    worker = ScoreWorker("localhost:9092", "localhost:50051")
    worker.consumer.poll_once()   # or run it as a process: `cheems service eval-worker` (evaluator.process)

Each score is flushed to the broker before the request's offset is committed, so a killed worker
at worst scores a prompt twice; the result sink stores the first and ignores the replay.
"""

from __future__ import annotations

from typing import Any

from cheems.v1 import events_pb2
from services.bus import topics
from services.bus.client import EventConsumer, Publisher

WORKER_GROUP = "cheems-score-workers"


class ScoreWorker:
    """Consumes score requests, calls the scorer, publishes scores (flushed before the offset commit)."""

    def __init__(self, bootstrap: str, scorer_url: str, token: str = "", group: str = WORKER_GROUP) -> None:
        from services.scorer.client import RewardClient

        self.client = RewardClient(scorer_url, token=token, timeout=300)
        self.publisher = Publisher(bootstrap)
        self.consumer = EventConsumer(bootstrap, [topics.SCORE_REQUESTS], group, self.handle, self.publisher)

    def handle(self, topic: str, key: str, event: Any) -> None:
        request = event.request
        scores = self.client.score(request.prompt, list(request.responses), request.system_prompt)
        out = events_pb2.ScoreEvent(
            header=events_pb2.EventHeader(event_id=event.header.event_id, producer="worker"),
            run_id=event.run_id,
            subset=event.subset,
            prompt_id=event.prompt_id,
            response_ids=event.response_ids,
            scores=scores,
        )
        self.publisher.publish(topics.SCORES, key, out)
        self.publisher.flush()

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()
        self.client.close()
