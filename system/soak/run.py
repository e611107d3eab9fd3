"""The whole soak: `cheems up` started, loaded, faulted, SIGKILLed and started again, settled, checked.

result = soak(SoakConfig(out=Path("out/soak"), kill_minutes=2), echo=print)
result.ok            # False: something acknowledged was lost or doubled, a service stayed down, or the
                     # restarted `cheems up` did not take over
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cheems import processes
from cheems.credentials import read_secret
from cheems.processes import ports
from cheems.roles import ANNOTATOR, SCORER_CLIENT
from services import hosting
from system.accounts import provision
from system.plan import BROKER_PORT, OPERATOR_ACCOUNT, SystemConfig, plan
from system.soak import chaos, checks, load
from system.soak.chaos import Kill
from system.soak.checks import Check
from system.soak.config import SoakConfig
from system.soak.ledger import Ledger
from system.supervisor import healthy

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "data" / "sample" / "open.jsonl"
READY = "up: every service healthy"


@dataclass
class SoakResult:
    checks: list[Check] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)
    restart_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)


def soak(config: SoakConfig, echo: Callable[[str], None]) -> SoakResult:
    began, result = time.monotonic(), SoakResult()

    def say(text: str) -> None:
        echo(f"[{time.monotonic() - began:7.1f}s] {text}")

    shutil.rmtree(config.out, ignore_errors=True)
    config.out.mkdir(parents=True)
    system = SystemConfig(data_dir=config.out / "system", db=config.db,
                          ports_from=config.ports_from or ports.free_block(), bench=(BENCH,))  # fmt: skip
    command = _up_command(config, system)
    up = _start_up(command, config.out / "up-1.log", config.start_timeout, say)
    stop = threading.Event()
    try:
        endpoints = _accounts(system, config)
        threads = load.start(stop, result.ledger, endpoints, config.ingest_rate, config.score_every, config.run_every)
        say(f"load: {config.ingest_rate}/s prompts, {config.annotators} annotators, Score every {config.score_every} s"
            + (f", an evaluation run every {config.run_every:.0f} s" if config.run_every else ""))  # fmt: skip
        time.sleep(config.warm)
        faults = chaos.Chaos(up.pid, plan(system), config.kill_every, config.seed, began, config.first).start()
        say(f"killing a random process every {config.kill_every:.0f} s for {config.kill_minutes:g} min")
        time.sleep(config.kill_minutes * 60)
        result.kills = faults.finish()
        for kill in result.kills:
            back = "not back" if kill.recovery is None else f"back in {kill.recovery:.1f} s"
            say(f"killed {kill.service}/{kill.process} (pid {kill.pid}) at {kill.at:.0f} s: {back}")
        if config.kill_up:
            up, took_over, result.restart_seconds = _restart(up, command, system, config, say)
            result.checks.append(took_over)
        time.sleep(config.after_restart)
        stop.set()
        for thread in threads:
            thread.join(load.TIMEOUT + 5)
        say("load stopped; settling")
        result.checks += _settle(system, result.ledger, config.settle, say)
        clients = ["ingest", "annotators", "score"] + (["evaluate"] if config.run_every else [])
        result.checks += [checks.clients_served(result.ledger, clients), _services_back(system),
                          _no_crash_loop(config.out)]  # fmt: skip
    finally:
        stop.set()
        _stop_up(up)
    return result


def _up_command(config: SoakConfig, system: SystemConfig) -> list[str]:
    command = [sys.executable, "-m", "cheems_cli", "up", "--data-dir", str(system.data_dir), "--auto-after", "0"]
    command += ["--ports-from", str(system.ports_from), "--bench", str(BENCH)]
    if config.db:
        command += ["--db", config.db]
    return command + list(config.up_args)


def _start_up(command: list[str], log: Path, timeout: float, say: Callable[[str], None]) -> subprocess.Popen[bytes]:
    """`cheems up` in its own session (a SIGKILL of it is a real crash), once it says every service is healthy."""
    with log.open("wb") as out:
        up = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + timeout
    while READY not in log.read_text(errors="replace"):
        if up.poll() is not None or time.monotonic() > deadline:
            _stop_up(up)
            raise RuntimeError(f"cheems up did not come up ({log}): {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    say(f"cheems up (pid {up.pid}) healthy; log {log}")
    return up


def _accounts(system: SystemConfig, config: SoakConfig) -> load.Endpoints:
    folder = config.out / "accounts"
    people = provision(system.database, folder, {f"soak-annotator-{n}": ANNOTATOR for n in range(config.annotators)})
    scorer = provision(system.database, folder, {"soak-scorer": SCORER_CLIENT})["soak-scorer"]
    port = system.port
    return load.Endpoints(
        ingestion=f"127.0.0.1:{port(hosting.INGESTION_PORT)}", annotation=f"127.0.0.1:{port(hosting.ANNOTATION_PORT)}",
        scorer=f"127.0.0.1:{port(hosting.SCORER_GRPC_PORT)}", evaluation=f"127.0.0.1:{port(hosting.EVALUATION_PORT)}",
        operator=read_secret(system.token_file(OPERATOR_ACCOUNT)), scorer_client=read_secret(scorer),
        annotators={name: read_secret(path) for name, path in people.items()}, bench=BENCH.name,
    )  # fmt: skip


def _restart(
    up: subprocess.Popen[bytes],
    command: list[str],
    system: SystemConfig,
    config: SoakConfig,
    say: Callable[[str], None],
) -> tuple[subprocess.Popen[bytes], Check, float]:
    """SIGKILL `cheems up`, start it again on the same data dir; the check: its own processes serve every port."""
    old = [p for p in processes.tree(up.pid) if p.pid != up.pid]
    os.kill(up.pid, signal.SIGKILL)
    up.wait()
    say(f"SIGKILLed cheems up (pid {up.pid}) and its {len(old)} descendants were left to fend for themselves")
    killed = time.monotonic()
    fresh = _start_up(command, config.out / "up-2.log", config.start_timeout, say)
    took = time.monotonic() - killed
    mine = {p.pid for p in processes.tree(fresh.pid)}
    strangers = {}
    for process in plan(system):
        if process.port:
            holders = set(ports.holders(process.port))
            if not holders or not holders <= mine:
                strangers[process.name] = sorted(holders)
    survivors = sorted(p.pid for p in old if processes.alive(p))
    ok = not strangers and not survivors
    detail = f"healthy again in {took:.1f} s; ports not served by its own processes: {strangers or 'none'}; "
    detail += f"old processes still alive: {survivors or 'none'}"
    return fresh, Check("restart takes over", ok, detail), took


def _settle(system: SystemConfig, ledger: Ledger, patience: float, say: Callable[[str], None]) -> list[Check]:
    """The store's checks, again every few seconds until they pass or `patience` runs out (events take their
    time), then the bus's, once."""
    from services.store.db import StoreConfig, create_engine_for

    engine = create_engine_for(StoreConfig(system.database))
    deadline = time.monotonic() + patience
    found = checks.store_checks(engine, ledger)
    while not all(c.ok for c in found) and time.monotonic() < deadline:
        time.sleep(5.0)
        found = checks.store_checks(engine, ledger)
    say("settled" if all(c.ok for c in found) else f"not settled after {patience:.0f} s")
    bootstrap = f"127.0.0.1:{system.port(BROKER_PORT)}"
    found += checks.bus_checks(engine, bootstrap, ledger, timeout=max(120.0, deadline - time.monotonic()))
    engine.dispose()
    return found


def _services_back(system: SystemConfig) -> Check:
    down = [p.name for p in plan(system) if p.port and not healthy(p, timeout=3.0)]
    return Check("services back", not down, f"not answering: {', '.join(down) or 'none'}")


def _no_crash_loop(out: Path) -> Check:
    """No service given up on, by either `cheems up`."""
    lines = [line for log in sorted(out.glob("up-*.log")) for line in log.read_text(errors="replace").splitlines()
             if " gave up" in line]  # fmt: skip
    return Check("no crash loop given up", not lines, "; ".join(lines[:3]) or "none")


def _stop_up(up: subprocess.Popen[bytes]) -> None:
    if up.poll() is None:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
