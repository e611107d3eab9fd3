"""The backends `report_to` may name, checked: what TrainConfig validates its field with (no imports)."""

from __future__ import annotations

from collections.abc import Iterable

BACKENDS = ("tensorboard", "mlflow", "wandb")
NONE = "none"  # report nowhere but metrics.jsonl


def backends(names: Iterable[str]) -> list[str]:
    """`names` without repeats, in order; [] for "none" (or nothing); ValueError naming `report_to` otherwise."""
    given = [n.strip().lower() for n in names if n.strip()]
    if NONE in given:
        if len(given) > 1:
            raise ValueError(f"report_to: {NONE} goes alone, got {','.join(given)}")
        return []
    unknown = [n for n in given if n not in BACKENDS]
    if unknown:
        raise ValueError(f"report_to: {', '.join(unknown)} is not one of {', '.join(BACKENDS)} (or {NONE})")
    return list(dict.fromkeys(given))
