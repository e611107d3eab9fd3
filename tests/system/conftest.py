"""A real `cheems up` for a test module: every process of the loop started, supervised, on a block of free ports.

    def test_x(running_up: RunningUp) -> None:
        running_up.config.port(hosting.INGESTION_PORT), running_up.supervisor.pids(), running_up.token("operator")

Module-scoped: a module's tests share one system (minutes to start on two cores), so put the checks that need a
running loop in one module rather than starting another.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cheems.credentials import read_secret
from cheems.processes.ports import free_block
from system.plan import SystemConfig
from system.supervisor import Supervisor
from system.up import up

START_TIMEOUT_S = 900.0


@dataclass
class RunningUp:
    config: SystemConfig
    supervisor: Supervisor
    events: list[tuple[str, str, str]] = field(default_factory=list)

    def token(self, account: str) -> str:
        return read_secret(self.config.token_file(account))


@pytest.fixture(scope="module")
def running_up(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Callable[..., Path]) -> Iterator[RunningUp]:
    """`cheems up` (system.up.up, in a thread of the test process) on the tiny checkpoint, no bench files."""
    config = SystemConfig(
        data_dir=tmp_path_factory.mktemp("system") / "up", base_model=tiny_checkpoint(), ports_from=free_block()
    )
    events: list[tuple[str, str, str]] = []
    stop, ready = threading.Event(), queue.Queue[Supervisor | BaseException]()

    def run() -> None:
        try:
            up(config, lambda *event: events.append(event), ready.put, stop)
        except BaseException as e:
            ready.put(e)

    thread = threading.Thread(target=run, name="cheems-up", daemon=True)
    thread.start()
    try:
        started = ready.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        stop.set()
        pytest.fail(f"cheems up did not come up in {START_TIMEOUT_S:.0f} s: {events[-5:]}")
    if isinstance(started, BaseException):
        raise started
    try:
        yield RunningUp(config, started, events)
    finally:
        stop.set()
        thread.join(120)
