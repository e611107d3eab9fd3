"""Errors of the evaluator, each a kind of the one tree in `cheems.errors` (mapped to statuses at the edges)."""

from cheems.errors import Cancelled, CheemsError, Conflict, InvalidInput, Unavailable


class EvaluationError(InvalidInput):
    """The inputs are well-formed but cannot be evaluated together, e.g. a benchmark response with no
    reward, or two bench files with the same subset name; or an option out of range."""


class BadRequest(InvalidInput):
    """A StartRun/GetRun request that cannot be served; the message names the field."""


class PublishFailed(Unavailable):
    """The broker did not take a run's score requests; the run is recorded as failed. Retrying may work."""


class RunFailed(CheemsError):
    """A run through Kafka ended failed (the message says why: GetRun's `error`)."""

    reason = "run_failed"


class WrongModel(Conflict):
    """The scorer kept answering with another model than the run's until the worker stopped waiting."""

    reason = "wrong_model"


class WorkerStopped(Cancelled):
    """A score worker was stopped while it waited for the scorer: the request is left uncommitted (redelivered)."""


class NotEvaluated(Conflict):
    """The model is known but has no finished evaluation yet (nothing to compare)."""

    reason = "not_evaluated"
