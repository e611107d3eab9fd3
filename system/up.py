"""`cheems up`: the whole loop on one machine, on embedded defaults, until SIGTERM or Ctrl-C.

    up(SystemConfig(data_dir=Path("out/up"), bench=[Path("data/sample/open.jsonl")]), on_event=print)

Holds the data directory (one `cheems up` per data directory; what a dead one left is stopped first:
`system.takeover`), lays it out (the bench files the evaluator reads, a log folder, the accounts' token files:
`system.accounts`), makes the base model when it is missing, then supervises every process of `plan(config)`
(`system.supervisor`). Every service checks its callers' tokens; each process is given the file of its account.
The data directory, the accounts' and the logs' folders are 0700, the store, token and log files 0600; beside the
operator's token file, `operator.addresses` lists this system's listeners: the only addresses the `cheems`
commands send that token to (`cheems_cli.options.account_token`).
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from sqlalchemy.engine import make_url

from cheems.credentials import private_file, private_folder, write_private
from services.observe.metrics import new_registry, serve_metrics
from system.accounts import provision
from system.plan import (
    BUS_ENVIRONMENT,
    OPERATOR_ACCOUNT,
    UP_METRICS_PORT,
    SystemConfig,
    addresses,
    plan,
)
from system.supervisor import OnEvent, Supervisor, SupervisorConfig
from system.takeover import claim


def prepare(config: SystemConfig) -> SystemConfig:
    """Create the data directory, copy the bench files under it, make the accounts (migrating the store first);
    the config to run (base model made if missing)."""
    private_folder(config.data_dir)
    (config.data_dir / "bench").mkdir(parents=True, exist_ok=True)
    for path in config.bench:
        shutil.copyfile(path, config.data_dir / "bench" / path.name)
    provision(config.database, config.accounts, config.account_roles)
    if not config.db:  # its own SQLite file (made 0600 when new): one of before is narrowed too
        private_file(Path(make_url(config.database).database or ""))
    listeners = sorted(set(addresses(config).values()))
    write_private(config.addresses_file(OPERATOR_ACCOUNT), "".join(f"{a}\n" for a in listeners))
    return dataclasses.replace(config, make_base_model=not (config.model / "config.json").exists())


def up(
    config: SystemConfig,
    on_event: OnEvent,
    on_ready: Callable[[Supervisor], None] | None = None,
    stop: threading.Event | None = None,
    supervisor: SupervisorConfig | None = None,
) -> None:
    """Start everything, call `on_ready`, supervise until `stop` is set or SIGTERM/SIGINT, then stop everything.
    DataDirInUse while another `cheems up` runs on the data directory."""
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    private_folder(config.data_dir)
    supervisor = supervisor or SupervisorConfig()
    with claim(config.data_dir, on_event, supervisor.grace) as environment:
        config = prepare(config)
        environment = {**environment, **BUS_ENVIRONMENT}
        registry = new_registry()  # its own /metrics: the supervisor's process, restarts per process
        exporter = serve_metrics(registry, "127.0.0.1", config.port(UP_METRICS_PORT))
        try:
            with Supervisor(plan(config), config.data_dir / "logs", supervisor, stop, environment, registry) as system:
                system.start(on_event)
                if on_ready is not None:
                    on_ready(system)
                system.run()
        finally:
            exporter.close()
