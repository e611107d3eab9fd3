"""What `cheems up` runs: every process of the loop, its command line, its port and how its health is read.

Pure: `plan(SystemConfig(...))` -> the ordered list of `Process`es; `system.supervisor` runs
them. The order is the start order (each waits for the ones before it to be healthy); stopping goes
in reverse. Every process is an ordinary `cheems` command, the same ones the Kubernetes Deployments run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from cheems.roles import OPERATOR, SCORER_CLIENT, SERVICE
from services import hosting

# the accounts every system on one machine has (system.accounts): {name: role}
OPERATOR_ACCOUNT = "operator"  # people's commands beside `cheems up` (they find its token file)
WORKER_ACCOUNT = "eval-worker"  # the score workers, calling the scorer: scoring is all they do
JUDGE_ACCOUNT = "judge"  # the AI judge, calling the annotation service: its pair tasks (only with a judge)
ACCOUNTS = {OPERATOR_ACCOUNT: OPERATOR, WORKER_ACCOUNT: SCORER_CLIENT}


@dataclass(frozen=True)
class SystemConfig:
    """The system on one machine.

    data_dir: the database (unless `db` is given), datasets, trainings, models, one log per process and the
        accounts' token files (`accounts/NAME.token`, 0600: ACCOUNTS).
    base_model: the checkpoint training starts from and the scorer serves until the first model is
        registered (`cheems up` makes the tiny real-vocabulary RM there when it is missing).
    bench: CheemsBench files every new model is evaluated on (copied under data_dir/bench).
    The annotation service's Export writes named files in data_dir/exports (a name, never a caller's path).
    judge_url / judge_model / judge_key_file: an OpenAI-compatible AI judge; empty = no judge worker (and no pair
        tasks). The judge calls the annotation service with the token of its own account (`judge`, role service).
    ai_sources / human_sources: which samples (by their source) the annotation service opens pair tasks (for the AI
        judge) and triple tasks (for people) of.
    auto_after: train automatically once this many new rankings arrived since the last dataset (0 = off).
    promotion: what an evaluated model becomes: "auto" (the gate promotes or rejects it) or "manual".
    ports_from: first port of the block the processes listen on (each process has its own offset).
    """

    data_dir: Path = Path("out/up")
    db: str = ""
    base_model: Path | None = None
    bench: Sequence[Path] = ()
    judge_url: str = ""
    judge_model: str = "judge"
    judge_key_file: str = ""
    judge_both_orders: bool = False
    ai_sources: str = ""
    human_sources: str = "*"
    training_recipe: str = "tiny-cpu"
    dataset_recipe: str = "human+ai-distant-debias"
    training_overrides: Sequence[str] = ()
    auto_after: int = 0
    promotion: str = "auto"
    nproc: int = 1
    ports_from: int = 0  # 0 = the standard ports (services.hosting)
    make_base_model: bool = False  # run `cheems init-model` into `model` first (it is missing)
    extra: dict[str, Sequence[str]] = field(default_factory=dict)  # more arguments per process name

    def __post_init__(self) -> None:
        if self.auto_after < 0:
            raise ValueError(f"auto_after must be >= 0, got {self.auto_after}")
        if self.nproc < 1:
            raise ValueError(f"nproc must be >= 1, got {self.nproc}")
        if self.promotion not in ("auto", "manual"):
            raise ValueError(f"promotion must be 'auto' or 'manual', got {self.promotion!r}")
        if not 0 <= self.ports_from <= 65535 - 100:
            raise ValueError(f"ports_from must be 0 or a port with room for 100 after it, got {self.ports_from}")

    @property
    def database(self) -> str:
        return self.db or f"sqlite:///{(self.data_dir / 'cheems.db').resolve()}"

    @property
    def broker_dir(self) -> Path:
        """Where the embedded broker keeps its topics, offsets and groups (they outlive its restarts)."""
        return self.data_dir / "broker"

    @property
    def model(self) -> Path:
        return self.base_model or self.data_dir / "models" / "base"

    @property
    def accounts(self) -> Path:
        """Where the accounts' token files are (system.accounts)."""
        return self.data_dir / "accounts"

    @property
    def account_roles(self) -> dict[str, str]:
        """The accounts this system runs with, {name: role} (system.accounts): ACCOUNTS, and the judge's."""
        return {**ACCOUNTS, JUDGE_ACCOUNT: SERVICE} if self.judge_url else dict(ACCOUNTS)

    def token_file(self, account: str) -> Path:
        return self.accounts / f"{account}.token"

    def addresses_file(self, account: str) -> Path:
        """Where the commands beside this system may send `account`'s token: its listeners, one host:port a line."""
        return self.accounts / f"{account}.addresses"

    def port(self, standard: int) -> int:
        """A standard port (50051, 9092, ...) moved into this system's block when `ports_from` is set."""
        if not self.ports_from:
            return standard
        return self.ports_from + OFFSETS[standard]


# what every process of the loop is told about its bus, the embedded broker on disk (services.bus.broker): its
# producers are not idempotent, since that broker can acknowledge a resent batch it never stored; a resend is
# written again instead, and consumers drop the duplicate by its event id
BUS_ENVIRONMENT = {"CHEEMS_KAFKA_IDEMPOTENCE": "false"}

# offsets inside a `ports_from` block, one per standard port
BROKER_PORT = 9092
UP_METRICS_PORT = 9050  # `cheems up`'s own /metrics (its restarts)
OFFSETS = {
    BROKER_PORT: 0,
    hosting.SCORER_GRPC_PORT: 1,
    hosting.SCORER_HTTP_PORT: 2,
    hosting.INGESTION_PORT: 3,
    hosting.ANNOTATION_PORT: 4,
    hosting.EVAL_WORKER_HEALTH_PORT: 5,
    hosting.EVAL_SINK_HEALTH_PORT: 6,
    hosting.EVALUATION_PORT: 7,
    hosting.TRAINING_PORT: 8,
    hosting.JUDGE_HEALTH_PORT: 9,
    hosting.EVALUATION_HTTP_PORT: 11,
    hosting.ANNOTATION_HTTP_PORT: 12,
    hosting.INGESTION_METRICS_PORT: 13,
    hosting.EVAL_WORKER_METRICS_PORT: 14,
    hosting.EVAL_SINK_METRICS_PORT: 15,
    hosting.TRAINING_METRICS_PORT: 16,
    hosting.JUDGE_METRICS_PORT: 17,
    UP_METRICS_PORT: 18,
}


@dataclass(frozen=True)
class Process:
    """One supervised process: `args` after `cheems`; health on `port` (gRPC health; "tcp" = a TCP connect);
    `once` = a step that must exit 0 before the next starts (migrations), never restarted; `metrics`: the HTTP
    port of its Prometheus /metrics (0 = none)."""

    name: str
    args: tuple[str, ...]
    port: int = 0
    health: str = "grpc"  # "grpc" | "tcp" | "none"
    once: bool = False
    start_timeout: float = 120.0
    metrics: int = 0


def plan(config: SystemConfig) -> list[Process]:
    """The processes of the loop, in start order."""
    db, p = config.database, config.port
    bootstrap = f"127.0.0.1:{p(BROKER_PORT)}"
    store_bus = ("--db", db, "--bootstrap", bootstrap)
    processes = [
        Process("broker", ("dev", "broker", "--port", str(p(BROKER_PORT)), "--data-dir", str(config.broker_dir)),
                p(BROKER_PORT), "tcp"),
        Process("migrations", ("db", "upgrade", "--db", db), once=True, health="none"),
        *([Process("base-model", ("init-model", "--out", str(config.model)), once=True, health="none")]
          if config.make_base_model else []),
        _grpc("ingestion", ("service", "ingestion", *store_bus), p(hosting.INGESTION_PORT),
              _metrics(p(hosting.INGESTION_METRICS_PORT))),
        _grpc("annotation", ("service", "annotation", *store_bus, "--human-sources", config.human_sources,
                             *(("--ai-sources", config.ai_sources or "*") if config.judge_url else ()),
                             "--http-port", str(p(hosting.ANNOTATION_HTTP_PORT)),
                             "--export-dir", str(config.data_dir / "exports")), p(hosting.ANNOTATION_PORT),
              metrics=p(hosting.ANNOTATION_HTTP_PORT)),
    ]  # fmt: skip
    if config.judge_url:
        processes.append(_judge(config))
    training = ["service", "training", *store_bus, "--data-dir", str(config.data_dir), "--model", str(config.model)]
    training += ["--recipe", config.training_recipe, "--dataset-recipe", config.dataset_recipe]
    training += ["--auto-after", str(config.auto_after), "--nproc", str(config.nproc)]
    training += [a for override in config.training_overrides for a in ("--set", override)]
    scorer = f"127.0.0.1:{p(hosting.SCORER_GRPC_PORT)}"
    serve = ["serve", "--model", str(config.model), "--follow", *store_bus, "--accounts"]  # accounts that score
    serve += ["--http-port", str(p(hosting.SCORER_HTTP_PORT)), "--grpc-port", str(p(hosting.SCORER_GRPC_PORT))]
    evaluation = ["service", "evaluation", *store_bus, "--bench-root", str(config.data_dir / "bench")]
    evaluation += ["--scorer-url", scorer, "--http-port", str(p(hosting.EVALUATION_HTTP_PORT))]  # the leaderboard
    if config.bench:
        evaluation += [a for b in config.bench for a in ("--evaluate-models", b.name)]
        evaluation += ["--promotion", config.promotion]
    processes += [
        _grpc("training", tuple(training), p(hosting.TRAINING_PORT), _metrics(p(hosting.TRAINING_METRICS_PORT))),
        Process("scorer", tuple(serve), p(hosting.SCORER_GRPC_PORT), start_timeout=300.0,
                metrics=p(hosting.SCORER_HTTP_PORT)),
        _health("eval-worker", ("service", "eval-worker", "--scorer-url", scorer, "--bootstrap", bootstrap,
                                "--token-file", str(config.token_file(WORKER_ACCOUNT))),
                p(hosting.EVAL_WORKER_HEALTH_PORT), _metrics(p(hosting.EVAL_WORKER_METRICS_PORT))),
        _health("eval-sink", ("service", "eval-sink", *store_bus), p(hosting.EVAL_SINK_HEALTH_PORT),
                _metrics(p(hosting.EVAL_SINK_METRICS_PORT))),
        _grpc("evaluation", tuple(evaluation), p(hosting.EVALUATION_PORT), metrics=p(hosting.EVALUATION_HTTP_PORT)),
    ]  # fmt: skip
    return [replace(pr, args=pr.args + tuple(config.extra.get(pr.name, ()))) for pr in processes]


def _grpc(name: str, args: tuple[str, ...], port: int, more: tuple[str, ...] = (), metrics: int = 0) -> Process:
    """A gRPC service listening on `port` (`--port`), health on the same port; `more`: `_metrics(port)` where it
    serves /metrics on a port of its own, else `metrics`: the HTTP port it serves /metrics on."""
    return Process(name, (*args, "--port", str(port), *more), port, metrics=metrics or _metrics_port(more))


def _health(name: str, args: tuple[str, ...], port: int, more: tuple[str, ...] = ()) -> Process:
    """A consumer with a health-only gRPC port (`--health-port`); `more` as `_grpc`'s."""
    return Process(name, (*args, "--health-port", str(port), *more), port, metrics=_metrics_port(more))


def _metrics(port: int) -> tuple[str, ...]:
    return ("--metrics-port", str(port))


def _metrics_port(more: tuple[str, ...]) -> int:
    return int(more[more.index("--metrics-port") + 1]) if "--metrics-port" in more else 0


def _judge(config: SystemConfig) -> Process:
    """The AI judge: the annotation service's client as its own account; no store, no bus."""
    args: tuple[str, ...] = (
        "service",
        "judge",
        "--annotation-url",
        f"127.0.0.1:{config.port(hosting.ANNOTATION_PORT)}",
    )
    args += ("--token-file", str(config.token_file(JUDGE_ACCOUNT)))
    args += ("--base-url", config.judge_url, "--model", config.judge_model)
    if config.judge_key_file:
        args += ("--api-key-file", config.judge_key_file)
    if config.judge_both_orders:
        args += ("--both-orders",)
    return _health(
        "judge", args, config.port(hosting.JUDGE_HEALTH_PORT), _metrics(config.port(hosting.JUDGE_METRICS_PORT))
    )


def addresses(config: SystemConfig) -> dict[str, str]:
    """Where a client finds each service of this system (what `cheems status` probes)."""
    return {pr.name: f"127.0.0.1:{pr.port}" for pr in plan(config) if pr.port}


def metrics_urls(config: SystemConfig) -> dict[str, str]:
    """Where Prometheus scrapes each process of this system, `cheems up`'s own ("up") included."""
    urls = {pr.name: f"http://127.0.0.1:{pr.metrics}/metrics" for pr in plan(config) if pr.metrics}
    return {**urls, "up": f"http://127.0.0.1:{config.port(UP_METRICS_PORT)}/metrics"}
