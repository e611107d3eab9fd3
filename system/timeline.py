"""The loop's timeline: every event on every topic as one line saying which service did what, and when.

    watcher = Timeline(bootstrap, on_line=print).start()   # a consumer group of its own, from the start
    ...
    watcher.stop()

`describe(topic, event)` is the pure part: (who, what) for one decoded event, or None for events not
worth a line (annotations: dozens per prompt; `count` tells how many arrived).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC
from typing import Any

from services.bus import topics
from services.bus.client import EventConsumer

EVAL_STATES = {2: "running", 3: "done", 4: "failed"}  # cheems.v1.RunState


def describe(topic: str, event: Any) -> tuple[str, str] | None:
    """(the service that produced it, what happened) for an event worth a line."""
    producer = event.header.producer or "?"
    if topic == topics.SAMPLES:
        s = event.sample
        return producer, f"sample {s.prompt_id[:8]} from {s.source or '-'}: {len(s.responses)} responses"
    if topic == topics.ANNOTATIONS:
        return None  # dozens per prompt: the ranking line says the prompt is done
    if topic == topics.RANKINGS:
        rank = dict(event.ranking.rank)
        order = " > ".join(k for k, _ in sorted(rank.items(), key=lambda kv: kv[1]))
        return producer, f"ranking of {event.ranking.prompt_id[:8]}: {order} (conflicts {event.conflicts})"
    if topic == topics.DATASETS:
        d = event.dataset
        return producer, f"dataset {d.dataset_id[:8]} ({d.recipe}): {d.prompts} prompts, {d.pairs} pairs"
    if topic == topics.MODELS:
        m, step = event.model, event.change
        if step.action and step.action != "registered":
            why = f" ({step.reason})" if step.reason else ""
            return (
                producer,
                f"model {m.model_id} {step.action}: {step.from_state} -> {step.to_state} by {step.actor}{why}",
            )
        overall = f", overall {m.overall:.4f} in training" if m.HasField("overall") else ""
        if not m.dataset_id:
            return producer, f"model {m.model_id} registered from {m.path}"
        return producer, f"model {m.model_id} registered from dataset {m.dataset_id[:8]} ({m.dataset_recipe}){overall}"
    if topic == topics.EVAL_RESULTS:
        run = event.run
        state = EVAL_STATES.get(run.state, "?")
        result = f": CheemsBench overall {run.result.overall:.4f}" if state == "done" else ""
        return producer, f"evaluation of {run.model_id or 'the served model'} {state}{result}"
    return None


class Timeline:
    """Consumes every topic in a group of its own and calls `on_line` with a formatted line per event."""

    TOPICS = (topics.SAMPLES, topics.ANNOTATIONS, topics.RANKINGS, topics.DATASETS, topics.MODELS, topics.EVAL_RESULTS)

    def __init__(self, bootstrap: str, on_line: Callable[[str], None], began: float | None = None) -> None:
        self.on_line, self.began = on_line, began if began is not None else time.monotonic()
        self.wall0 = time.time() - (time.monotonic() - self.began)  # `began` on the wall clock
        self.events: list[tuple[float, str, Any]] = []  # (seconds since began, topic, event)
        self._stop = threading.Event()
        self._consumer = EventConsumer(bootstrap, self.TOPICS, f"cheems-timeline-{uuid.uuid4().hex[:8]}", self._on)
        self._thread = threading.Thread(target=self._consumer.run, args=(self._stop,), daemon=True)

    def start(self) -> Timeline:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def line(self, who: str, what: str, at: float | None = None) -> None:
        """A line stamped `at` seconds after the start (now, when not given)."""
        seconds = time.monotonic() - self.began if at is None else at
        self.on_line(f"[{seconds:7.1f}s] {who:<12} {what}")

    def _on(self, topic: str, key: str, event: Any) -> None:
        self.events.append((time.monotonic() - self.began, topic, event))
        described = describe(topic, event)
        if described is not None:  # stamped when it was produced: topics are read in no common order
            produced = event.header.produced_at.ToDatetime().replace(tzinfo=UTC).timestamp()
            self.line(*described, at=produced - self.wall0)

    def count(self, topic: str) -> int:
        return sum(1 for _, t, _ in self.events if t == topic)

    def of(self, topic: str) -> list[Any]:
        return [event for _, t, event in self.events if t == topic]
