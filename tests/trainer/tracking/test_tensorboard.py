"""TensorBoard: the event files of a real (cut and resumed) tiny training, read back with tensorboard's own reader,
hold metrics.jsonl's figures at its steps, each step once."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cheems.extras import MissingExtra
from tests.trainer.tracking.conftest import CUT, Reported, expected
from trainer.tracking.tensorboard import TensorBoardRun


def test_event_files_equal_metrics_jsonl(reported: Reported) -> None:
    log_dir = reported.out / "tensorboard"
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    by_step = {r["step"]: r for r in reported.records}
    assert sorted(by_step) == list(range(1, reported.result.steps + 1))  # the resume wrote each step once
    wanted = {name for r in reported.records for name in expected(r)}
    assert wanted <= set(events.Tags()["scalars"])
    for name in wanted:
        points = events.Scalars(name)
        logged = {step: expected(r)[name] for step, r in by_step.items() if name in expected(r)}
        assert [p.step for p in points] == sorted(logged), name  # every step once: the resume purged nothing twice
        assert [p.value for p in points] == [np.float32(logged[p.step]) for p in points], name  # float32 events
    assert {r["tracking"]["tensorboard"] for r in reported.records if "tracking" in r} == {str(log_dir.resolve())}
    assert [r["step"] for r in reported.records if "tracking" in r] == [1, CUT + 1]  # each process's first record


def test_the_parameters_are_a_text_table_with_the_data_hash(reported: Reported) -> None:
    events = EventAccumulator(str(reported.out / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    (text,) = events.Tensors("params/text_summary")  # once: the resumed run did not write them again
    table = text.tensor_proto.string_val[0].decode()
    metadata = json.loads((reported.out / "model" / "cheems_metadata.json").read_text(encoding="utf-8"))
    assert f"| data_sha256 | {metadata['data_sha256']} |" in table
    assert "| lr | 0.003 |" in table and '| report_to | ["tensorboard", "mlflow"] |' in table
    assert metadata["tracking"]["tensorboard"] == str((reported.out / "tensorboard").resolve())


def test_without_tensorboard_the_error_says_how_to_go_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # find_spec: None, as when not installed
    with pytest.raises(MissingExtra, match=r"need tensorboard, which is not installed: --set report_to=none"):
        TensorBoardRun(tmp_path / "tb")
