"""ScorerConfig, the one declaration of the scorer's knobs, and the `cheems serve` options made from it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from cheems.errors import ConfigError
from cheems_cli.main import app
from services.scorer import runtime
from services.scorer.config import ScorerConfig
from services.scorer.models.loading import execution_of

# every `cheems serve` option the tests, scripts and Kubernetes manifests use
KNOWN_OPTIONS = (
    "model",
    "grpc-port",
    "http-port",
    "backend",
    "triton-url",
    "host",
    "max-responses",
    "max-length",
    "truncation",
    "max-batch-size",
    "token",
    "tls-cert",
    "tls-key",
    "device",
    "max-batch-items",
    "max-queries",
    "max-message-bytes",
    "max-call-seconds",
    "triton-restarts",
    "drain-seconds",
    "prefix-sharing",
    "dtype",
    "attn-implementation",
    "max-batch-tokens",
    "queue-delay-us",
)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"backend": "onnx"}, "backend"),
        ({"truncation": "middle"}, "truncation"),
        ({"max_responses": 0}, "max_responses"),
        ({"max_message_bytes": 10}, "max_message_bytes"),
        ({"max_call_seconds": 0}, "max_call_seconds"),
        ({"triton_restarts": -1}, "triton_restarts"),
        ({"http_port": -2}, "http_port"),
        ({"tls_cert": "a.pem"}, "tls_cert"),
        ({"tls_key": "a.pem"}, "tls_key"),
        ({"auth_token": "x"}, "auth_token"),  # the old name: a misspelled knob fails, never vanishes
        ({"dtype": "fp8"}, "dtype"),
        ({"attn_implementation": "flash3"}, "attn_implementation"),
        ({"max_batch_tokens": 0}, "max_batch_tokens"),
    ],
)
def test_config_errors_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ScorerConfig(model="m", **changes)  # type: ignore[arg-type]


def test_the_environment_sets_a_field_and_keywords_beat_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHEEMS_SCORER_TOKEN", "from-env-Jx4Qm8Tz2Wk7Rb5N")  # what the manifests and `cheems score` use
    monkeypatch.setenv("CHEEMS_SCORER_MAX_LENGTH", "512")
    monkeypatch.setenv("CHEEMS_SCORER_URL", "scorer:50051")  # the clients' setting, no field here
    config = ScorerConfig(max_length=64)
    assert (config.token, config.max_length, config.max_responses) == ("from-env-Jx4Qm8Tz2Wk7Rb5N", 64, 64)
    assert "from-env-Jx4Qm8Tz2Wk7Rb5N" not in repr(config)


def test_every_field_is_documented_once_and_every_known_option_is_made() -> None:
    assert all(field.description for field in ScorerConfig.model_fields.values())
    serve = typer.main.get_command(app).get_command(None, "serve")  # type: ignore[attr-defined]
    options = {opt.removeprefix("--") for param in serve.params for opt in param.opts}
    assert set(KNOWN_OPTIONS) <= options
    assert options - {"help"} == {name.replace("_", "-") for name in ScorerConfig.model_fields}
    defaults = {param.name: param.default for param in serve.params}
    assert all(defaults[name] == field.default for name, field in ScorerConfig.model_fields.items())


def test_serve_help_lists_each_fields_help_once() -> None:
    env = {**os.environ, "TERMINAL_WIDTH": "1000", "NO_COLOR": "1"}  # one line per option
    result = subprocess.run(
        [sys.executable, "-m", "cheems_cli", "serve", "--help"], capture_output=True, text=True, env=env, check=True
    )
    for name, field in ScorerConfig.model_fields.items():
        assert result.stdout.count(str(field.description)) == 1, name
        assert len(re.findall(rf"--{name.replace('_', '-')}\b", result.stdout)) >= 1, name
        assert f"CHEEMS_SCORER_{name.upper()}" in result.stdout, name


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[ScorerConfig]:
    """`cheems serve`'s config, captured instead of serving; announces fixed ports."""
    seen: list[ScorerConfig] = []

    def serve(config: ScorerConfig, on_serving: Any = None) -> None:
        seen.append(config)
        on_serving(type("Bound", (), {"grpc_port": 5, "http_port": 6})())

    monkeypatch.setattr(runtime, "serve", serve)
    return seen


def test_serve_options_reach_the_config_env_fills_the_rest(
    served: list[ScorerConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHEEMS_SCORER_TOKEN", "s3cret-Q7vK2mN9xR4tW8yB6pL3")
    monkeypatch.setenv("CHEEMS_SCORER_MAX_LENGTH", "512")
    monkeypatch.setenv("CHEEMS_SCORER_MAX_RESPONSES", "7")
    args = ["serve", "--model", str(tmp_path), "--max-length", "100", "--grpc-port", "0", "--http-port", "-1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    [config] = served
    assert (config.model, config.max_length, config.grpc_port) == (str(tmp_path), 100, 0)  # command line
    assert (config.token, config.max_responses) == ("s3cret-Q7vK2mN9xR4tW8yB6pL3", 7)  # environment
    assert (config.backend, config.max_batch_items, config.dtype) == ("triton", 128, "auto")  # defaults
    assert result.output == "serving: gRPC 127.0.0.1:5  HTTP off\n"


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--max-length", "0"], {}, "'--max-length'"),
        (["--tls-cert", "a.pem"], {}, "'--tls-key'"),
        ([], {"CHEEMS_SCORER_MAX_LENGTH": "0"}, "'CHEEMS_SCORER_MAX_LENGTH'"),
        ([], {"CHEEMS_SCORER_GRPC_PORT": "many"}, "'CHEEMS_SCORER_GRPC_PORT'"),
        (["--truncation", "middle"], {}, "'--truncation'"),
        (["--max-call-seconds", "-1"], {}, "'--max-call-seconds'"),
        (["--prefix-sharing", "maybe"], {}, "'--prefix-sharing'"),
        ([], {"CHEEMS_SCORER_PREFIX_SHARING": "maybe"}, "'CHEEMS_SCORER_PREFIX_SHARING'"),
        (["--dtype", "half"], {}, "'--dtype'"),
        ([], {"CHEEMS_SCORER_DTYPE": "int8"}, "'CHEEMS_SCORER_DTYPE'"),
        (["--max-batch-tokens", "0"], {}, "'--max-batch-tokens'"),
    ],
)
def test_a_bad_value_is_a_usage_error_naming_its_option(
    served: list[ScorerConfig],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    named: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output
    assert not served


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--token", "a" * 16], {}, "'--token'"),
        ([], {"CHEEMS_SCORER_TOKEN": "abcdefghijklmnopqrst"}, "'CHEEMS_SCORER_TOKEN'"),
        (["--token-file", "FILE"], {}, "'--token-file'"),
    ],
)
def test_a_weak_static_token_is_refused_without_showing_it(
    served: list[ScorerConfig],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    named: str,
) -> None:
    (tmp_path / "token").write_text("s3cret\n", encoding="utf-8")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = [str(tmp_path / "token") if a == "FILE" else a for a in args]
    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.replace("│", " ").split())  # rich's box, unwrapped
    assert named in said and re.search("too easy to guess|at least 128 are needed", said), said
    assert "Traceback" not in said and not any(weak in said for weak in ("a" * 16, "abcdefghijklmnopqrst", "s3cret"))
    assert not served


@pytest.mark.parametrize(
    ("args", "env", "sharing"),
    [
        ([], {}, True),  # on by default
        (["--prefix-sharing", "off"], {}, False),
        (["--prefix-sharing", "OFF"], {}, False),
        ([], {"CHEEMS_SCORER_PREFIX_SHARING": "off"}, False),
        (["--prefix-sharing", "on"], {"CHEEMS_SCORER_PREFIX_SHARING": "off"}, True),  # the command line wins
    ],
)
def test_prefix_sharing_is_on_or_off(
    served: list[ScorerConfig],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    sharing: bool,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["serve", "--model", str(tmp_path), *args])
    assert result.exit_code == 0, result.output
    assert [config.prefix_sharing for config in served] == [sharing]


def test_serve_needs_a_checkpoint_directory(served: list[ScorerConfig], tmp_path: Path) -> None:
    for args in ([], ["--model", str(tmp_path / "missing")]):
        result = CliRunner().invoke(app, ["serve", *args])
        assert result.exit_code == 2 and "'--model'" in result.output, result.output
    assert not served


def test_follow_needs_no_model_but_a_broker(served: list[ScorerConfig], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHEEMS_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setenv("CHEEMS_DATABASE_URL", "sqlite:///registry.db")
    result = CliRunner().invoke(app, ["serve", "--follow"])
    assert result.exit_code == 2 and "'--bootstrap'" in result.output, result.output
    assert "CHEEMS_KAFKA_BOOTSTRAP" in result.output
    result = CliRunner().invoke(app, ["serve", "--follow", "--bootstrap", "b:9092", "--triton-url", "t:8001"])
    assert result.exit_code == 2 and "'--triton-url'" in result.output, result.output
    assert not served
    monkeypatch.setenv("CHEEMS_KAFKA_BOOTSTRAP", "broker:9092")
    result = CliRunner().invoke(app, ["serve", "--follow", "--model-id", "rm-x"])
    assert result.exit_code == 0, result.output
    [config] = served
    assert (config.follow, config.bootstrap, config.db, config.model_id) == (
        True,
        "broker:9092",
        "sqlite:///registry.db",  # no --model: the registry's best model, from the settings' store
        "rm-x",
    )


def test_follow_with_a_model_still_reads_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each models event is checked in the registry, so --follow has one even when it starts from --model."""
    monkeypatch.setenv("CHEEMS_DATABASE_URL", "sqlite:///registry.db")
    config = ScorerConfig(follow=True, model="m", bootstrap="b:9092")
    assert config.db == "sqlite:///registry.db"
    assert ScorerConfig(model="m").db == ""  # without --follow (or --accounts) no store


def test_dtype_from_the_command_line_or_the_environment(
    served: list[ScorerConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHEEMS_SCORER_DTYPE", "float16")
    assert CliRunner().invoke(app, ["serve", "--model", str(tmp_path)]).exit_code == 0
    assert CliRunner().invoke(app, ["serve", "--model", str(tmp_path), "--dtype", "bfloat16"]).exit_code == 0
    assert [config.dtype for config in served] == ["float16", "bfloat16"]


def test_attention_from_the_command_line_or_the_environment(
    served: list[ScorerConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ScorerConfig(model="m").attn_implementation == "auto"
    monkeypatch.setenv("CHEEMS_SCORER_ATTN_IMPLEMENTATION", "eager")
    assert CliRunner().invoke(app, ["serve", "--model", str(tmp_path)]).exit_code == 0
    args = ["serve", "--model", str(tmp_path), "--attn-implementation", "flex_attention"]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert [config.attn_implementation for config in served] == ["eager", "flex_attention"]


def test_the_attention_is_resolved_for_the_device_and_refused_at_start_in_one_line() -> None:
    assert execution_of(ScorerConfig(model="m")).attention == "sdpa"  # auto on the CPU
    assert execution_of(ScorerConfig(model="m", attn_implementation="flex_attention")).attention == "flex_attention"
    with pytest.raises(ConfigError) as caught:
        execution_of(ScorerConfig(model="m", attn_implementation="flash_attention_2"))
    assert "flash_attention_2 cannot run" in str(caught.value) and "\n" not in str(caught.value)
