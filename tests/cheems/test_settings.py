"""cheems.settings: one default per shared value, overridden by CHEEMS_* environment variables."""

from __future__ import annotations

import pytest

from cheems.settings import Settings, env_name, setting


def test_defaults_are_the_embedded_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    for field in Settings.model_fields:
        monkeypatch.delenv(env_name(field), raising=False)
    assert setting("database_url") == "sqlite:///cheems.db"
    assert setting("kafka_bootstrap") == ""


def test_the_environment_overrides_a_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHEEMS_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
    monkeypatch.setenv("CHEEMS_KAFKA_BOOTSTRAP", "kafka:9092")
    assert Settings().database_url.startswith("postgresql+psycopg://")
    assert setting("kafka_bootstrap") == "kafka:9092"


def test_env_names_follow_the_fields() -> None:
    assert env_name("scorer_token") == "CHEEMS_SCORER_TOKEN"
    with pytest.raises(KeyError):
        env_name("no_such_setting")


def test_unrelated_cheems_variables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHEEMS_SOMETHING_ELSE", "x")  # e.g. a component's own prefix: not an error here
    assert Settings().database_url
