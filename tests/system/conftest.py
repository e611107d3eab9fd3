"""A real `cheems up` for a test module: every process of the loop started, supervised, on a block of free ports,
the AI judge included (answered by the simulated judge from data/sample/human.jsonl's ranks: its samples go to the
judge when ingested with the source AI_SOURCE, those of HUMAN_SOURCE to people).

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
from cheems.formats.cheemsbench import read_bench
from cheems.processes.ports import free_block
from services.annotation.simulation.judge import JudgeServer, SimulatedJudge
from system.plan import SystemConfig
from system.supervisor import Supervisor
from system.up import up

START_TIMEOUT_S = 900.0
JUDGED = Path(__file__).resolve().parents[2] / "data" / "sample" / "human.jsonl"  # what the simulated judge knows
AI_SOURCE, HUMAN_SOURCE = "judged-by-ai", "annotated-by-people"


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
    judge = JudgeServer(SimulatedJudge(read_bench(JUDGED))).start()
    config = SystemConfig(
        data_dir=tmp_path_factory.mktemp("system") / "up", base_model=tiny_checkpoint(), ports_from=free_block(),
        judge_url=judge.base_url, ai_sources=AI_SOURCE, human_sources=HUMAN_SOURCE,
    )  # fmt: skip
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
        judge.stop()
        pytest.fail(f"cheems up did not come up in {START_TIMEOUT_S:.0f} s: {events[-5:]}")
    try:
        if isinstance(started, BaseException):
            raise started
        yield RunningUp(config, started, events)
    finally:
        stop.set()
        thread.join(120)
        judge.stop()
