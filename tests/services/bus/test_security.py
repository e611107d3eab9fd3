"""Kafka credentials: the settings, their one mapping to kafka-python's arguments, and the half configurations
refused with the variable to set. No broker here enforces SCRAM (Tansu 0.6's credential store does not find the
users it is given), so the SASL_SSL path is checked as far as kafka-python building its clients from the mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from cheems.errors import ConfigError
from cheems.settings import Settings
from services.bus import client
from services.bus.security import KafkaSecurity, client_kwargs, connection_kwargs

CA_PEM = "-----BEGIN CERTIFICATE-----\nnot parsed until a connection\n-----END CERTIFICATE-----\n"


def sasl(tmp_path: Path, password: str = "s3cret\n") -> KafkaSecurity:
    (tmp_path / "password").write_text(password)
    (tmp_path / "ca.crt").write_text(CA_PEM)
    return KafkaSecurity(
        "SASL_SSL", "SCRAM-SHA-512", "cheems-annotation", str(tmp_path / "password"), str(tmp_path / "ca.crt")
    )


def test_plaintext_by_default_and_nothing_else() -> None:
    assert KafkaSecurity.from_settings(Settings()) == KafkaSecurity()
    assert client_kwargs(KafkaSecurity()) == {"security_protocol": "PLAINTEXT"}


def test_sasl_ssl_maps_to_kafka_python_arguments(tmp_path: Path) -> None:
    security = sasl(tmp_path)
    assert client_kwargs(security, "pw") == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "cheems-annotation",
        "sasl_plain_password": "pw",
        "ssl_cafile": str(tmp_path / "ca.crt"),
        "ssl_check_hostname": True,
    }
    assert connection_kwargs(security)["sasl_plain_password"] == "s3cret"  # read from the file, newline dropped


def test_read_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    security = sasl(tmp_path)
    monkeypatch.setenv("CHEEMS_KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("CHEEMS_KAFKA_USERNAME", security.username)
    monkeypatch.setenv("CHEEMS_KAFKA_PASSWORD_FILE", security.password_file)
    monkeypatch.setenv("CHEEMS_KAFKA_CA_FILE", security.ca_file)
    assert KafkaSecurity.from_settings() == security
    assert connection_kwargs()["sasl_plain_username"] == "cheems-annotation"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"protocol": "SASL_SSL"}, "CHEEMS_KAFKA_USERNAME, CHEEMS_KAFKA_PASSWORD_FILE, CHEEMS_KAFKA_CA_FILE too"),
        ({"protocol": "SASL_SSL", "username": "u", "password_file": "/p"}, "needs CHEEMS_KAFKA_CA_FILE too"),
        ({"username": "u"}, "CHEEMS_KAFKA_USERNAME given but CHEEMS_KAFKA_SECURITY_PROTOCOL is PLAINTEXT"),
        ({"password_file": "/p", "ca_file": "/c"}, "CHEEMS_KAFKA_PASSWORD_FILE, CHEEMS_KAFKA_CA_FILE given but"),
        ({"protocol": "SASL_PLAINTEXT"}, "CHEEMS_KAFKA_SECURITY_PROTOCOL must be one of PLAINTEXT, SASL_SSL"),
        ({"mechanism": "PLAIN"}, "CHEEMS_KAFKA_SASL_MECHANISM must be one of SCRAM-SHA-512"),
    ],
)
def test_half_configurations_are_refused(fields: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KafkaSecurity(**fields)


def test_unreadable_files_are_refused_by_name(tmp_path: Path) -> None:
    security = sasl(tmp_path)
    with pytest.raises(ConfigError, match=r"CHEEMS_KAFKA_PASSWORD_FILE: cannot read .*/nope"):
        connection_kwargs(KafkaSecurity(**{**security.__dict__, "password_file": str(tmp_path / "nope")}))
    with pytest.raises(ConfigError, match=r"CHEEMS_KAFKA_CA_FILE: no file .*/nope"):
        connection_kwargs(KafkaSecurity(**{**security.__dict__, "ca_file": str(tmp_path / "nope")}))
    with pytest.raises(ConfigError, match=r"CHEEMS_KAFKA_PASSWORD_FILE .* holds no password"):
        connection_kwargs(sasl(tmp_path, password="\n"))


class Recorded:
    """Stands in for a kafka-python client (kafka-python 3 connects in its constructor): keeps the arguments."""

    made: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    def __init__(self, *topics: str, **config: Any) -> None:
        self.made.append((type(self).__name__, config))

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def test_producers_consumers_and_admins_take_the_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client the bus makes gets the same SASL_SSL arguments, each one an option kafka-python knows."""
    import kafka
    import kafka.admin

    from services.bus import broker

    real = {
        "KafkaProducer": kafka.KafkaProducer,
        "KafkaConsumer": kafka.KafkaConsumer,
        "KafkaAdminClient": kafka.admin.KafkaAdminClient,
    }
    fakes = {name: type(name, (Recorded,), {}) for name in real}
    Recorded.made = []
    monkeypatch.setattr(kafka, "KafkaProducer", fakes["KafkaProducer"])
    monkeypatch.setattr(kafka, "KafkaConsumer", fakes["KafkaConsumer"])
    monkeypatch.setattr(kafka.admin, "KafkaAdminClient", fakes["KafkaAdminClient"])
    security = sasl(tmp_path)
    for name, value in {
        "SECURITY_PROTOCOL": "SASL_SSL",
        "USERNAME": security.username,
        "PASSWORD_FILE": security.password_file,
        "CA_FILE": security.ca_file,
    }.items():
        monkeypatch.setenv(f"CHEEMS_KAFKA_{name}", value)

    client.Publisher("b:9093")
    client.EventConsumer("b:9093", ["cheems.samples.v1"], "g", lambda *a: None)  # and its dead-letter publisher
    broker.create_topics("b:9093", [])
    assert [name for name, _ in Recorded.made] == [
        "KafkaProducer",
        "KafkaConsumer",
        "KafkaProducer",
        "KafkaAdminClient",
    ]
    expected = client_kwargs(security, "s3cret")
    for name, config in Recorded.made:
        assert {k: config[k] for k in expected} == expected, name
        assert set(config) <= set(real[name].DEFAULT_CONFIG), f"{name}: {set(config) - set(real[name].DEFAULT_CONFIG)}"
