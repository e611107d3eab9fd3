"""What the annotation service and the AI judge say on `/metrics` (beside the gRPC and process metrics).

- `cheems_annotation_tasks{state}`: the tasks in the store, open or done (one GROUP BY at each scrape);
- `cheems_annotations_total{kind}`: the annotations this process stored, human or ai;
- the sample intake's consumer lag and dead letters (`services.bus.metrics`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from services.annotation.service import AnnotationService
from services.bus.metrics import watch_consumers
from services.observe.metrics import ReadAtScrape, new_registry
from services.store.reads import state_counts


def annotation_metrics(service: AnnotationService) -> CollectorRegistry:
    """A process registry with the tasks in the store by state (read at each scrape) and the annotations this
    process stored by kind (the judge's process reports its AI annotations the same way)."""
    registry = new_registry()
    registry.register(
        ReadAtScrape("cheems_annotation_tasks", "Annotation tasks in the store, by state (open, done)",
                     lambda: state_counts(service.engine, "tasks"), label="state")
    )  # fmt: skip
    registry.register(annotations_counter(service))
    watch_consumers(registry)  # the sample intake's
    return registry


def annotations_counter(service: AnnotationService) -> ReadAtScrape:
    return ReadAtScrape(
        "cheems_annotations", "Annotations stored by this process, by kind (human, ai)",
        lambda: dict(service.stored), kind="counter", label="kind",
    )  # fmt: skip
