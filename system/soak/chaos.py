"""The soak's faults: which processes make up each service of a running `cheems up`, a random one SIGKILLed on a
period, and how long its service took to answer its health check again.

The tree is read from /proc (`cheems.processes`): `cheems up`'s children are the services (matched to the plan by their
command lines), everything below a child (Tansu under the broker, Triton and its stubs under the scorer, torchrun
workers, a vLLM engine) belongs to that service. A victim is drawn service first (the `first` ones, then every
service once in a random order, and again), then one of its processes at random, so the broker is hit as often as
the scorer however many processes each has.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cheems import processes
from cheems.processes import Proc
from system.plan import Process
from system.supervisor import healthy

QUIET = 10.0  # seconds a service may go on answering after a kill before it counts as not stopped by it


@dataclass(frozen=True)
class Kill:
    """One fault: when (seconds into the soak), which service, which process, and the seconds until the service
    answered its health check again (None: not within the wait)."""

    at: float
    service: str
    pid: int
    process: str
    recovery: float | None


def services(up_pid: int, plan: Sequence[Process]) -> dict[str, list[Proc]]:
    """{service name: its processes, the service's own first} of the `cheems up` whose pid is `up_pid`."""
    found: dict[str, list[Proc]] = {}
    for child in processes.children(up_pid):
        name = service_of(processes.command(child.pid), plan)
        if name is not None:
            found[name] = processes.tree(child.pid)  # the child first, then what it started
    return found


def service_of(cmdline: Sequence[str], plan: Sequence[Process]) -> str | None:
    """The plan's process whose arguments the command line ends with (`python -m cheems_cli ARGS`)."""
    for process in plan:
        if not process.once and tuple(cmdline[-len(process.args) :]) == process.args:
            return process.name
    return None


def recovery(process: Process, since: float, patience: float) -> float | None:
    """Seconds from `since` until the service answers after having failed to (a process whose death its service
    shrugged off answers all along: 0); None if it does not answer within `patience` seconds."""
    failed = False
    while time.monotonic() - since < patience:
        if healthy(process, timeout=1.0):
            if failed:
                return time.monotonic() - since
            if time.monotonic() - since > QUIET:  # a kill that stops the service shows well within this
                return 0.0
        else:
            failed = True
        time.sleep(0.25)
    return None


class Chaos:
    """Kills a random process of a random service every `every` seconds until stopped; `kills` holds the record."""

    def __init__(
        self, up_pid: int, plan: Sequence[Process], every: float, seed: int, began: float, first: Sequence[str] = ()
    ) -> None:
        """`first`: services hit first, in this order; then each service once, in a random order, and again."""
        self.up_pid, self.plan, self.every, self.began = up_pid, list(plan), every, began
        self.by_name: Mapping[str, Process] = {p.name: p for p in plan}
        self.rng = random.Random(seed)
        self._next: list[str] = list(reversed(first))  # popped from the end
        self.kills: list[Kill] = []
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-chaos", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> Chaos:
        self._thread.start()
        return self

    def finish(self) -> list[Kill]:
        self.stop.set()
        self._thread.join()
        return list(self.kills)

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            victim = self._draw()
            if victim is None:
                continue
            name, process = victim
            words = processes.command(process.pid)
            killed_at = time.monotonic()
            if not processes.kill([process], signal.SIGKILL):
                continue  # it died meanwhile: draw again next period
            label = Path(words[0]).name if words else "?"
            back = recovery(self.by_name[name], killed_at, patience=max(self.every * 4, 120.0))
            self.kills.append(Kill(killed_at - self.began, name, process.pid, label, back))

    def _draw(self) -> tuple[str, Proc] | None:
        """The next service of the cycle that runs now, and one of its processes, at random."""
        tree = services(self.up_pid, self.plan)
        for _ in range(2 * len(self.plan) + 2):
            if not self._next:
                cycle = sorted(tree)
                self.rng.shuffle(cycle)
                self._next = cycle
                if not cycle:
                    return None
            name = self._next.pop()
            if tree.get(name):
                return name, self.rng.choice(tree[name])
        return None
