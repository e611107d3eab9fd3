"""`cheems service ...` options refused before anything starts: a clear usage error naming the option; the queue's
options `cheems up` hands the annotation service."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cheems_cli.main import app


@pytest.mark.parametrize("share", ["1.5", "-0.1", "nan"])
def test_annotation_refuses_a_double_share_outside_zero_to_one(share: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "never.db"
    command = ["service", "annotation", "--db", f"sqlite:///{db}", "--port", "0", "--http-port", "-1"]
    result = CliRunner().invoke(app, [*command, "--double-share", share], env={"TERMINAL_WIDTH": "1000"})
    assert result.exit_code == 2, result.output
    assert "--double-share" in result.output and "double_share must be a number in [0, 1]" in result.output
    assert not db.exists()  # refused before the service opened its database


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--min-chinese-ratio", "1.5"),
        ("--max-chars", "0"),
        ("--distant-margin", "-1"),
        ("--max-held", "0"),
        ("--people-per-prompt", "-1"),
        ("--lease", "0"),
    ],
)
def test_rule_filter_and_distant_thresholds_out_of_range_are_refused(option: str, value: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "never.db"
    service = "training" if option.startswith("--distant") else "annotation"
    command = ["service", service, "--db", f"sqlite:///{db}", "--port", "0"]
    command += ["--data-dir", str(tmp_path)] if service == "training" else []
    result = CliRunner().invoke(app, [*command, option, value], env={"TERMINAL_WIDTH": "1000"})
    assert result.exit_code == 2, result.output
    assert option in result.output and "Invalid value" in result.output
    assert not db.exists()


def test_training_refuses_a_set_option_without_key_and_value(tmp_path) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "never.db"
    command = ["service", "training", "--db", f"sqlite:///{db}", "--port", "0", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(app, [*command, "--set", "epochs"], env={"TERMINAL_WIDTH": "1000"})
    assert result.exit_code == 2 and "--set" in result.output and "expected key=value" in result.output
    assert not db.exists()


def test_up_hands_the_queue_options_to_the_annotation_service(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import system.up
    from system.plan import plan

    started = []
    monkeypatch.setattr(system.up, "up", lambda config, event, ready: started.append(config))
    command = ["up", "--data-dir", str(tmp_path), "--people-per-prompt", "8", "--max-held", "3", "--lease", "600"]
    result = CliRunner().invoke(app, command, env={"TERMINAL_WIDTH": "1000"})
    assert result.exit_code == 0, result.output
    [annotation] = [p for p in plan(started[0]) if p.name == "annotation"]
    args = " ".join(annotation.args)
    assert "--max-held 3 --lease 600.0 --people-per-prompt 8" in args
