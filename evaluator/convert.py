"""Conversions between the evaluator's values and `cheems.v1` messages (evaluation.proto); no I/O.

    result_proto(evaluate_files(bench, rewards))   # -> cheems.v1.EvalResult
    run_proto(run_row, items_scored)                # a stored EvalRun -> cheems.v1.EvalRun

Metrics that can be undefined (a category with no ranked pairs has no accuracy and no ECE) are
`optional` in the proto and left unset here, as the JSON result has null; never 0.0.
"""

from __future__ import annotations

from cheems.v1 import evaluation_pb2
from evaluator.errors import BadRequest
from evaluator.metrics import CategoryMetrics, EvalResult, Semantics, SubsetMetrics
from evaluator.report import from_json
from services.store.models import EvalRun
from services.store.repository import run_failure

SEMANTICS_PROTO = {
    Semantics.PAPER: evaluation_pb2.SEMANTICS_PAPER,
    Semantics.OFFICIAL: evaluation_pb2.SEMANTICS_OFFICIAL,
}
SEMANTICS_FROM_PROTO: dict[int, Semantics] = {
    evaluation_pb2.SEMANTICS_UNSPECIFIED: Semantics.PAPER,
    evaluation_pb2.SEMANTICS_PAPER: Semantics.PAPER,
    evaluation_pb2.SEMANTICS_OFFICIAL: Semantics.OFFICIAL,
}
STATE_PROTO = {
    "running": evaluation_pb2.RUN_STATE_RUNNING,
    "succeeded": evaluation_pb2.RUN_STATE_SUCCEEDED,
    "failed": evaluation_pb2.RUN_STATE_FAILED,
}
FAILED_MESSAGE = "the score requests could not be published"  # the reason of a failed run that kept none


def semantics_from_proto(value: int) -> Semantics:
    """A request's semantics (unspecified = paper); BadRequest naming the field for an unknown value."""
    if value not in SEMANTICS_FROM_PROTO:
        raise BadRequest(f"semantics: unknown value {value}")
    return SEMANTICS_FROM_PROTO[value]


def category_proto(metrics: CategoryMetrics) -> evaluation_pb2.CategoryMetrics:
    return evaluation_pb2.CategoryMetrics(
        accuracy=metrics.accuracy,  # None leaves the optional field unset
        exact_match=metrics.exact_match,
        ece=metrics.ece,
        prompts=metrics.prompts,
        pairs=metrics.pairs,
    )


def subset_proto(metrics: SubsetMetrics) -> evaluation_pb2.SubsetMetrics:
    return evaluation_pb2.SubsetMetrics(
        accuracy=metrics.accuracy,
        exact_match=metrics.exact_match,
        ece=metrics.ece,
        prompts=metrics.prompts,
        pairs=metrics.pairs,
        per_category={name: category_proto(m) for name, m in metrics.per_category.items()},
    )


def result_proto(result: EvalResult) -> evaluation_pb2.EvalResult:
    return evaluation_pb2.EvalResult(
        semantics=SEMANTICS_PROTO[result.semantics],
        overall=result.overall,
        subsets={name: subset_proto(s) for name, s in result.subsets.items()},
    )


def run_proto(run: EvalRun, items_scored: int) -> evaluation_pb2.EvalRun:
    """The run as `cheems.v1.EvalRun`: files, scorer, state, progress and, once complete, the metrics."""
    message = evaluation_pb2.EvalRun(
        run_id=run.id,
        scorer_url=run.scorer_url,
        bench_files=[str(p) for p in run.bench_files],
        semantics=SEMANTICS_PROTO[Semantics(run.semantics)],
        state=STATE_PROTO[run.state],
        items_total=run.items_total,
        items_scored=items_scored,
        ece_bins=run.ece_bins,
        model_id=run.model_id or "",
    )
    if run.state == "succeeded" and run.result is not None:
        message.result.CopyFrom(result_proto(from_json(run.result)))
    if run.state == "failed":
        message.error = run_failure(run) or FAILED_MESSAGE  # runs failed before reasons were kept have none
    return message
