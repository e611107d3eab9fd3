"""How a Kafka client proves who it is: nothing (the embedded broker, on loopback) or SCRAM-SHA-512 over TLS.

    security = KafkaSecurity.from_settings()          # CHEEMS_KAFKA_SECURITY_PROTOCOL, _USERNAME, ...
    KafkaProducer(bootstrap_servers=b, **connection_kwargs(security))

On a Strimzi cluster (k8s/kafka/) every service is a `KafkaUser` with SCRAM-SHA-512 credentials and ACLs
on its own topics and groups; the User Operator writes the password into a Secret named like the user
(key `password`) and the cluster CA into `cheems-cluster-ca-cert` (key `ca.crt`). The pods mount both
and set:

    CHEEMS_KAFKA_SECURITY_PROTOCOL=SASL_SSL
    CHEEMS_KAFKA_USERNAME=cheems-annotation
    CHEEMS_KAFKA_PASSWORD_FILE=/var/run/secrets/kafka/user/password    # never the password itself
    CHEEMS_KAFKA_CA_FILE=/var/run/secrets/kafka/ca/ca.crt

`client_kwargs` is the one mapping from these to kafka-python's keyword arguments; producers, consumers
and admin clients all take theirs from `connection_kwargs`, so none can connect another way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheems.errors import ConfigError

PLAINTEXT, SASL_SSL = "PLAINTEXT", "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SASL_SSL)
MECHANISMS = ("SCRAM-SHA-512",)  # what Strimzi's `scram-sha-512` listeners and KafkaUsers speak


def _env(field: str) -> str:
    from cheems.settings import env_name

    return env_name(field)


@dataclass(frozen=True)
class KafkaSecurity:
    """A Kafka client's credentials: `protocol` PLAINTEXT (none) or SASL_SSL (all of the others)."""

    protocol: str = PLAINTEXT
    mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password_file: str = ""  # a file holding the password (a mounted Secret); the password itself is never a setting
    ca_file: str = ""  # PEM of the CA the brokers' certificates are signed by (Strimzi's cluster CA)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ConfigError(
                f"{_env('kafka_security_protocol')} must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}"
            )
        if self.mechanism not in MECHANISMS:
            raise ConfigError(
                f"{_env('kafka_sasl_mechanism')} must be one of {', '.join(MECHANISMS)}, got {self.mechanism!r}"
            )
        given = {f: getattr(self, f) for f in ("username", "password_file", "ca_file") if getattr(self, f)}
        if self.protocol == PLAINTEXT and given:
            names = ", ".join(_env(f"kafka_{f}") for f in given)
            raise ConfigError(
                f"{names} given but {_env('kafka_security_protocol')} is {PLAINTEXT}: set it to {SASL_SSL} "
                "to use them, or unset them (credentials are never sent in the clear)"
            )
        if self.protocol == SASL_SSL:
            missing = [_env(f"kafka_{f}") for f in ("username", "password_file", "ca_file") if not getattr(self, f)]
            if missing:
                raise ConfigError(f"{_env('kafka_security_protocol')}={SASL_SSL} needs {', '.join(missing)} too")

    @classmethod
    def from_settings(cls, settings: Any = None) -> KafkaSecurity:
        """From `cheems.settings.Settings` (the environment's `CHEEMS_KAFKA_*`, when not given)."""
        if settings is None:
            from cheems.settings import Settings

            settings = Settings()
        return cls(
            protocol=settings.kafka_security_protocol.strip().upper() or PLAINTEXT,
            mechanism=settings.kafka_sasl_mechanism.strip().upper() or "SCRAM-SHA-512",
            username=settings.kafka_username,
            password_file=settings.kafka_password_file,
            ca_file=settings.kafka_ca_file,
        )


def client_kwargs(security: KafkaSecurity, password: str = "") -> dict[str, Any]:
    """kafka-python's keyword arguments (KafkaProducer, KafkaConsumer, KafkaAdminClient) for `security`.

    `password` is the content of `security.password_file` (read by `connection_kwargs`).
    """
    if security.protocol == PLAINTEXT:
        return {"security_protocol": PLAINTEXT}
    if not password:
        raise ConfigError(f"{_env('kafka_password_file')} ({security.password_file}) holds no password")
    return {
        "security_protocol": SASL_SSL,
        "sasl_mechanism": security.mechanism,
        "sasl_plain_username": security.username,
        "sasl_plain_password": password,
        "ssl_cafile": security.ca_file,
        "ssl_check_hostname": True,
    }


def read_password(path: str) -> str:
    """The password in `path`, without a trailing newline (as Secrets and `echo` write it)."""
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as e:
        raise ConfigError(f"{_env('kafka_password_file')}: cannot read {path}: {e.strerror}") from None


def connection_kwargs(security: KafkaSecurity | None = None) -> dict[str, Any]:
    """`client_kwargs` of `security` (default: the environment's), the password read from its file now."""
    security = security or KafkaSecurity.from_settings()
    if security.protocol == SASL_SSL and not Path(security.ca_file).is_file():
        raise ConfigError(f"{_env('kafka_ca_file')}: no file {security.ca_file}")
    password = read_password(security.password_file) if security.protocol == SASL_SSL else ""
    return client_kwargs(security, password)
