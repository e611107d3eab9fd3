"""Settings every component shares, read once from the environment (`CHEEMS_*`), each with one default.

    CHEEMS_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test cheems db upgrade

The command line's options fall back to these (an option given on the command line wins), the
Kubernetes manifests set them as env, and code that runs without the CLI reads `Settings()`.
Switching from the embedded defaults to a cluster is configuration, not code. Component-specific
knobs live in each component's own config (e.g. `services.scorer.config.ScorerConfig`, `CHEEMS_SCORER_*`).
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "CHEEMS_"


class Settings(BaseSettings):
    """Where the shared parts are: the store, the bus, the scorer, the bench files, the AI judge."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = "sqlite:///cheems.db"  # SQLAlchemy URL of the store
    kafka_bootstrap: str = ""  # Kafka bootstrap servers; empty = the embedded broker where one can start
    # how Kafka clients authenticate (services.bus.security): PLAINTEXT, or SASL_SSL with all four below
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = "SCRAM-SHA-512"
    kafka_username: str = ""
    kafka_password_file: str = ""  # a file holding the password (a mounted Secret), never the password itself
    kafka_ca_file: str = ""  # PEM of the CA that signed the brokers' certificates
    # idempotent producers (Kafka's own dedupe of a resent batch). `cheems up` turns it off for its embedded broker
    # on disk, which can acknowledge a resent batch it never stored (services.bus.broker): a resend is then written
    # again, and consumers drop the duplicate by its event id
    kafka_idempotence: bool = True
    scorer_url: str = ""  # host:port of the scorer's gRPC endpoint
    scorer_token: str = ""  # bearer token the scorer requires (empty = none)
    bench_root: str = ""  # the evaluation service reads StartRun's bench files from under here
    data_dir: str = "out/cheems"  # datasets and training runs (checkpoints, models): shared storage in a cluster
    cache_dir: str = ""  # token arrays of training data (trainer.data.cache); empty = $XDG_CACHE_HOME/cheems
    training_url: str = ""  # host:port of the training service's gRPC endpoint
    tls_ca: str = ""  # PEM file of the CA the services' TLS certificates are signed by; empty = plaintext gRPC
    annotation_url: str = ""  # host:port of the annotation service's gRPC endpoint (the AI judge's)
    ai_sources: str = ""  # sample sources (fnmatch, space-separated) the annotation service opens AI pair tasks of
    judge_base_url: str = ""  # OpenAI-compatible API of the AI judge, e.g. https://host/v1
    judge_model: str = ""
    judge_api_key: str = ""
    # how processes log (services.observe.logs): "text" (ISO timestamps) or "json" (one object a line); `cheems up`
    # passes both to its children. log_level: DEBUG, INFO, ...; empty = INFO for services, WARNING for commands
    log_format: str = "text"
    log_level: str = ""


def env_name(field: str) -> str:
    """The environment variable of a `Settings` field: database_url -> CHEEMS_DATABASE_URL."""
    if field not in Settings.model_fields:
        raise KeyError(field)
    return ENV_PREFIX + field.upper()


def setting(field: str) -> str:
    """The field's current value: the environment's, else its default."""
    return str(getattr(Settings(), field))
