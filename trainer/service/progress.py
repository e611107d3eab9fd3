"""What a running training has written, as the training service records it: progress and the exported model.

The trainer appends one JSON line per optimizer step to OUT/metrics.jsonl (step, total_steps, loss,
eval when it evaluated, and tracking, the ids of the runs it reports to, in each process's first line);
`MetricsReader` reads the lines added since its last call, whole lines only (a line being written is read next
time). The exported model is complete once OUT/model/cheems_metadata.json exists: `save_model` writes it after
the weights and the tokenizer.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
METRICS = "metrics.jsonl"
MODEL = "model"
METADATA = "cheems_metadata.json"


def progress_of(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The registry fields (step, total_steps, loss, overall, tracking) the records update; later records win."""
    changes: dict[str, Any] = {}
    for record in records:
        if isinstance(record.get("step"), int):
            changes["step"] = record["step"]
        if isinstance(record.get("total_steps"), int):
            changes["total_steps"] = record["total_steps"]
        if _finite(record.get("loss")):
            changes["loss"] = float(record["loss"])
        overall = (record.get("eval") or {}).get("overall") if isinstance(record.get("eval"), dict) else None
        if _finite(overall):
            changes["overall"] = float(overall)  # type: ignore[arg-type]
        if isinstance(record.get("tracking"), dict) and record["tracking"]:
            changes["tracking"] = record["tracking"]
    return changes


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class MetricsReader:
    """Reads OUT/metrics.jsonl incrementally."""

    def __init__(self, out_dir: str | Path) -> None:
        self.path = Path(out_dir) / METRICS
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # whole lines only
        self.offset += end
        records = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                log.warning("%s: skipping a line that is not JSON", self.path)
                continue
            if isinstance(record, dict):
                records.append(record)
        return records


def exported_model(out_dir: str | Path) -> Path | None:
    """OUT/model when the trainer finished exporting it, else None."""
    model = Path(out_dir) / MODEL
    return model if (model / METADATA).is_file() else None


def final_overall(model_dir: Path) -> float | None:
    """The CheemsBench overall of the training's final evaluation, from the model's metadata, when any."""
    overall = (_metadata(model_dir).get("final_eval") or {}).get("overall")
    return float(overall) if isinstance(overall, int | float) and _finite(overall) else None


def model_tracking(model_dir: Path) -> dict[str, str] | None:
    """The runs that reported the model's training ({backend: id}), from its metadata, when any."""
    tracking = _metadata(model_dir).get("tracking")
    return {str(k): str(v) for k, v in tracking.items()} if isinstance(tracking, dict) and tracking else None


def _metadata(model_dir: Path) -> dict[str, Any]:
    try:
        metadata = json.loads((model_dir / METADATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return metadata if isinstance(metadata, dict) else {}
