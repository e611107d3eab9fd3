"""What every command shares: option types read from the environment, and the one error -> exit code edge."""

from __future__ import annotations

import inspect
import logging
import os
import re
from collections.abc import Callable, Collection
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from cheems import errors
from cheems.credentials import read_secret
from cheems.settings import Settings, env_name, setting
from services.observe.logs import LOG_FORMAT_ENV, level_of, log_format_of, setup_logging
from services.observe.output import wrap_output

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound=BaseSettings)


def from_settings(field: str, help: str) -> Any:
    """An option that falls back to `cheems.settings.Settings` (its env var, then its one default)."""
    default = Settings.model_fields[field].default
    return typer.Option(
        envvar=env_name(field),
        default_factory=lambda: setting(field),
        show_default=str(default) if default else False,
        help=help,
    )


# where `cheems up` (default --data-dir) keeps its operator's token, found by the commands run beside it, and the
# addresses of its listeners: the only ones that token is sent to (or over TLS)
UP_OPERATOR_TOKEN = Path("out/up/accounts/operator.token")
UP_OPERATOR_ADDRESSES = UP_OPERATOR_TOKEN.with_suffix(".addresses")

# Options several commands share; the Kubernetes manifests set their environment variables.
ListenHost = Annotated[
    str, typer.Option(help="Address to listen on: 127.0.0.1 = this machine only (default); 0.0.0.0 in a pod.")
]
DatabaseUrl = Annotated[str, from_settings("database_url", "SQLAlchemy URL of the store.")]
MetricsPort = Annotated[
    int,
    typer.Option(
        min=-1, max=65535, help="HTTP port of Prometheus' /metrics, on --host (0 = any free port, -1 = none)."
    ),
]
KafkaBootstrap = Annotated[str, from_settings("kafka_bootstrap", "Kafka bootstrap servers (empty: none or embedded).")]
ScorerUrl = Annotated[str, from_settings("scorer_url", "host:port of the scorer's gRPC endpoint.")]
ScorerToken = Annotated[
    str,
    from_settings(
        "scorer_token",
        "Bearer token of the scorer (empty = none); `ps` shows an option: prefer the env var or --token-file.",
    ),
]
ScorerTokenFile = Annotated[
    Path | None,
    typer.Option(
        envvar="CHEEMS_SCORER_TOKEN_FILE", dir_okay=False, help="Read the scorer's bearer token from this file."
    ),
]
# An account's bearer token for the services (cheems.roles): a file, or CHEEMS_TOKEN; never an option's value.
AccountTokenFile = Annotated[
    Path | None,
    typer.Option(
        envvar="CHEEMS_TOKEN_FILE",
        dir_okay=False,
        help="File holding your account's bearer token (else CHEEMS_TOKEN, else a `cheems up` operator's file "
        f"{UP_OPERATOR_TOKEN}, when there).",
    ),
]
# TLS: a server's certificate and key; a client's CA
TlsCert = Annotated[str, typer.Option(help="PEM certificate: the gRPC port speaks TLS only (with --tls-key).")]
TlsKey = Annotated[str, typer.Option(help="PEM private key of --tls-cert.")]
TlsCa = Annotated[str, from_settings("tls_ca", "PEM file of the CA the services' TLS certificates are signed by.")]
# The annotation queue's rule (services.annotation.config.QueueConfig): `cheems service annotation` and `cheems up`
# hand work out by it; `cheems status` takes the same --people-per-prompt and --lease to report on it
MaxHeld = Annotated[
    int,
    typer.Option(
        min=1,
        max=1000,
        help="Tasks an annotator holds at once (ListTasks tops theirs up to it; the page shows one): a few minutes' "
        "work ahead, no hoarding.",
    ),
]
PeoplePerPrompt = Annotated[
    int,
    typer.Option(
        min=0,
        help="Different people a prompt's triples need: 0 = one per triple (the paper's rule: 7 responses, 11 "
        "triples, 11 people); N = a person may take up to ceil(triples / N) of a prompt's, so N people finish it.",
    ),
]
Lease = Annotated[
    float,
    typer.Option(
        min=1.0,
        help="Seconds a held task nobody works on (claimed, opened on the page) stays its holder's alone; then "
        "anyone may take it.",
    ),
]
JudgeBaseUrl = Annotated[str, from_settings("judge_base_url", "OpenAI-compatible API of the AI judge, e.g. .../v1")]
JudgeModel = Annotated[str, from_settings("judge_model", "Model name at that API.")]
JudgeApiKey = Annotated[
    str,
    from_settings(
        "judge_api_key", "API key of the judge endpoint; `ps` shows it: prefer the env var or --api-key-file."
    ),
]
JudgeApiKeyFile = Annotated[
    Path | None,
    typer.Option(envvar="CHEEMS_JUDGE_API_KEY_FILE", dir_okay=False, help="Read the judge's API key from this file."),
]


def secret_option(value: str, file: Path | None, option: str) -> str:
    """A secret given as an option (or its env var) or, when `file` is given, read from that file (which wins)."""
    return value if file is None else read_secret(file, option)


def account_token(file: Path | None, target: str, tls: bool = False) -> str:
    """The bearer token to call the service at `target` with: `file`'s, else CHEEMS_TOKEN (the user's choice: sent
    wherever they point), else the operator's of a `cheems up` run from this directory (UP_OPERATOR_TOKEN), but only
    to an address that `cheems up` listens on (UP_OPERATOR_ADDRESSES, exactly as it printed them) or over TLS
    (`tls`: a CA given, so the server proves who it is); else "" (no credential), and a note on stderr says why."""
    if file is not None:
        return read_secret(file, "--token-file")
    if from_environment := os.environ.get("CHEEMS_TOKEN", "").strip():
        return from_environment
    if not UP_OPERATOR_TOKEN.is_file():
        return ""
    if tls or _saved_for(target):
        return read_secret(UP_OPERATOR_TOKEN)
    typer.echo(
        f"note: no token sent to {target}: the operator's token of `cheems up` ({UP_OPERATOR_TOKEN}) goes only to "
        f"the addresses it listens on ({UP_OPERATOR_ADDRESSES}) or over TLS; give --token-file or CHEEMS_TOKEN",
        err=True,
    )
    return ""


def _saved_for(target: str) -> bool:
    """Whether `target` (host:port, maybe dns:/// or ipv4:) is one of UP_OPERATOR_ADDRESSES' lines."""
    try:
        saved = UP_OPERATOR_ADDRESSES.read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return False
    return re.sub(r"^(dns:///|ipv4:|ipv6:)", "", target.strip()) in saved


def listen(port: int, host: str, tls_cert: str = "", tls_key: str = "") -> Any:
    """The HostConfig of a service's options (a usage error naming the option when TLS is half given)."""
    from services.hosting import HostConfig

    try:
        return HostConfig(port=port, host=host, tls_cert=tls_cert, tls_key=tls_key)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--tls-cert/--tls-key") from None


def settings_options(
    settings: type[S], exclude: Collection[str] = ()
) -> Callable[[Callable[[S], Any]], Callable[..., Any]]:
    """A command whose options are the fields of a pydantic-settings class, declared there once.

        @app.command("serve")
        @clear_errors
        @settings_options(ScorerConfig)
        def serve_command(config: ScorerConfig) -> None: ...

    Each field (but `exclude`) becomes `--field-name`: its type the field's annotation (a Literal
    lists its choices; a bool marked `json_schema_extra={"cli": "on|off"}` takes `on` or `off`, others are
    `--name/--no-name` flags), its help the field's description plus its environment variable, its shown
    default the field's default. Only options given on the command line are passed to `settings`,
    so the others come from the environment (`<env_prefix><FIELD>`), then the default. The
    environment is read by `settings`, not by click, so the variables are optional. A ValidationError
    becomes a usage error naming the option (or the variable) it came from: exit 2, one line.
    """
    prefix = str(settings.model_config.get("env_prefix", ""))
    fields = {name: field for name, field in settings.model_fields.items() if name not in exclude}
    parameters = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]
    for name, field in fields.items():
        help = f"{field.description or ''} (env {(prefix + name).upper()})".strip()
        option = typer.Option(help=help)
        annotation: Any = field.annotation
        if annotation is bool and (field.json_schema_extra or {}) == {"cli": "on|off"}:
            annotation = str  # a value, `--name on|off`, not typer's `--name/--no-name` pair
            option = typer.Option(
                help=help, parser=on_off, metavar="<on|off>", show_default="on" if field.default else "off"
            )
        parameters.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[annotation, option], default=field.default
            )
        )

    def decorate(command: Callable[[S], Any]) -> Callable[..., Any]:
        def run(ctx: typer.Context, **values: Any) -> Any:
            given = {n: v for n, v in values.items() if _from_command_line(ctx, n)}
            try:
                config = settings(**given)
            except ValidationError as e:
                raise _usage_error(e, given, prefix) from None
            return command(config)

        run.__name__, run.__qualname__, run.__doc__ = command.__name__, command.__qualname__, command.__doc__
        run.__module__ = command.__module__
        run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # what typer reads
        return run

    return decorate


def on_off(value: str | bool) -> bool:
    """An on|off option's value (its default arrives as the field's bool)."""
    if isinstance(value, bool):
        return value
    if value.lower() not in ("on", "off"):
        raise typer.BadParameter(f"on or off, got {value!r}")
    return value.lower() == "on"


def _from_command_line(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"  # typer's vendored click.core.ParameterSource


def _usage_error(error: ValidationError, given: Collection[str], prefix: str) -> typer.BadParameter:
    """One line naming each invalid field as its environment variable where that set it, else as its option."""
    parts = []
    for problem in error.errors():
        field = str(problem["loc"][0]) if problem["loc"] else ""
        env = (prefix + field).upper()
        from_env = field not in given and any(name.upper() == env for name in os.environ)
        where = env if from_env else f"--{field.replace('_', '-')}"
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] != "value_error":
            message += f", got {problem['input']!r}"
        parts.append((f"'{where}'" if field else "", message))
    if len(parts) == 1:
        return typer.BadParameter(parts[0][1], param_hint=parts[0][0] or None)
    return typer.BadParameter("; ".join(f"{where}: {message}".lstrip(": ") for where, message in parts))


def required(value: str, option: str) -> str:
    """An option that this command cannot run without, though its setting may be empty elsewhere."""
    if not value.strip():
        raise typer.BadParameter(f"required here (or set {option})")
    return value


def key_values(assignments: list[str] | None, option: str = "--set") -> dict[str, str]:
    """Repeated `key=value` options as a dict (later ones win); a usage error names one without `=` or a key."""
    pairs = {}
    for kv in assignments or []:
        key, sep, value = kv.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected key=value, got {kv!r}", param_hint=option)
        pairs[key.strip()] = value
    return pairs


# error kind -> exit code: 2 = the input or the request (as for a usage error), 3 = a dependency
# (broker, scorer, Triton) could not serve; retrying later may work; 1 = anything else we raised.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (errors.InvalidInput, 2),
    (errors.NotFound, 2),
    (errors.Conflict, 2),
    (errors.LimitExceeded, 2),
    (errors.Unauthenticated, 2),
    (errors.PermissionDenied, 2),
    (OSError, 2),  # a file that cannot be read or written
    (errors.Unavailable, 3),
    (errors.DeadlineExceeded, 3),
    (errors.Cancelled, 3),
    (errors.CheemsError, 1),
]


# A command that reads many records (ingest, convert) and took the good ones but rejected some.
EXIT_REJECTED = 1


def exit_code(error: BaseException) -> int:
    return next(code for kind, code in EXIT_CODES if isinstance(error, kind))


def clear_errors(command: F) -> F:
    """Report expected failures as one `error:` line on stderr and their exit code, without a traceback."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (errors.CheemsError, OSError) as e:
            say(f"error: {e}", err=True)
            raise typer.Exit(exit_code(e)) from None

    return run  # type: ignore[return-value]


# How a command logs (services.observe.logs): the main callback sets up "cheems" (warnings; -v: debug), a
# long-lived service names itself and logs INFO; CHEEMS_LOG_LEVEL sets either. A format given with --log-format
# is put in the environment, so the processes a command starts (`cheems up`'s children, torchrun's ranks) log
# alike. `say` is a command's line for people: echoed in text mode, a log record in JSON mode, so that a
# service's log holds nothing but JSON lines.
_chosen: dict[str, object] = {"verbose": False}
_said = logging.getLogger("cheems_cli")


def configure_logging(verbose: bool, log_format: str | None) -> None:
    """The main callback's setup: the command line's options, before any command runs."""
    if log_format:
        os.environ[LOG_FORMAT_ENV] = log_format_of(log_format)
    _chosen["verbose"] = verbose
    level_of(_log_level(service=True))  # a bad CHEEMS_LOG_LEVEL is refused before any command runs
    setup_logging("cheems", level=_log_level(service=False))


def as_service(name: str) -> None:
    """A long-lived service's setup: its lines name it, at INFO unless asked otherwise; in JSON mode what it (or a
    process it starts) writes without logging becomes JSON lines too (services.observe.output)."""
    handler = setup_logging(name, level=_log_level(service=True))
    if log_format_of(None) == "json":
        wrap_output(handler)


def _log_level(service: bool) -> str:
    if _chosen["verbose"]:
        return "DEBUG"
    return setting("log_level").strip().upper() or ("INFO" if service else "WARNING")


def say(text: str, err: bool = False) -> None:
    """A line for the person running the command (an address it listens on, an error)."""
    if log_format_of(None) == "json":
        _said.setLevel(logging.INFO)  # said whatever the root level: it is the command's output
        _said.log(logging.ERROR if err else logging.INFO, text)
    else:
        typer.echo(text, err=err)
