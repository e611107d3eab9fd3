"""Errors of the evaluator: the inputs are well-formed but cannot be evaluated together."""

from cheems.errors import InvalidInput


class EvaluationError(InvalidInput):
    """E.g. a benchmark response with no reward, or two bench files with the same subset name."""
