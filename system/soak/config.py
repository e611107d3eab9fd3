"""The soak's one config object: the load, the faults and the time each phase gets."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class SoakConfig:
    """out: the system's data dir (made fresh) and the soak's own report; db: the store ("" = SQLite in `out`).
    kill_minutes: how long random processes are killed, one every `kill_every` seconds (after `warm` seconds of
    load without faults); then `cheems up` itself is SIGKILLed and started again on the same data dir, the load
    goes on for `after_restart` seconds, stops, and the system gets up to `settle` seconds to deliver what it
    acknowledged. Load: `ingest_rate` prompts a second, `annotators` people with accounts of their own, one Score
    call every `score_every` seconds, an evaluation run every `run_every` seconds (0 = none). `kill_up`: SIGKILL
    `cheems up` at the end of the kills (the restart check). `first`: services hit first, then each service once in a
    random order (`seed`), and again."""

    out: Path = Path("out/soak")
    db: str = ""
    ports_from: int = 0
    kill_minutes: float = 2.0
    kill_every: float = 20.0
    warm: float = 10.0
    after_restart: float = 20.0
    settle: float = 180.0
    ingest_rate: float = 5.0
    annotators: int = 12
    score_every: float = 0.5
    run_every: float = 90.0
    kill_up: bool = True
    first: tuple[str, ...] = ("broker", "scorer")  # hit first: the bus every service needs, the RLHF loop's reward
    seed: int = 0
    start_timeout: float = 420.0
    up_args: tuple[str, ...] = field(default_factory=tuple)  # more `cheems up` arguments

    def __post_init__(self) -> None:
        for name in ("kill_every", "score_every", "ingest_rate"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SoakConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("kill_minutes", "warm", "after_restart", "settle", "run_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"SoakConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.annotators < 5:
            raise ValueError(
                f"SoakConfig.annotators must be >= 5 (a prompt's triples go to different people), got {self.annotators}"
            )
