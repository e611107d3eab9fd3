"""What every client was told: the writes acknowledged (to be found afterwards) and the calls refused, by code,
with the longest run of failures (the outage a client saw). Thread-safe: every client thread writes to one."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Outage:
    """A client's failing stretch: from its first failure to its next success."""

    began: float = 0.0
    longest: float = 0.0


@dataclass
class Ledger:
    acknowledged: dict[str, set[str]] = field(default_factory=dict)  # kind -> ids (prompt texts, annotation ids...)
    calls: Counter[str] = field(default_factory=Counter)  # client -> calls answered OK
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (client, status code) -> count
    outages: dict[str, Outage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ack(self, kind: str, *ids: str) -> None:
        with self._lock:
            self.acknowledged.setdefault(kind, set()).update(ids)

    def ok(self, client: str) -> None:
        with self._lock:
            self.calls[client] += 1
            outage = self.outages.get(client)
            if outage is not None and outage.began:
                outage.longest = max(outage.longest, time.monotonic() - outage.began)
                outage.began = 0.0

    def failed(self, client: str, code: str) -> None:
        with self._lock:
            self.errors[(client, code)] += 1
            outage = self.outages.setdefault(client, Outage())
            if not outage.began:
                outage.began = time.monotonic()

    def acked(self, kind: str) -> set[str]:
        with self._lock:
            return set(self.acknowledged.get(kind, ()))

    def longest_outage(self, client: str) -> float:
        """Seconds of the client's longest failing stretch (one still open counts up to now)."""
        with self._lock:
            outage = self.outages.get(client)
            if outage is None:
                return 0.0
            still = time.monotonic() - outage.began if outage.began else 0.0
            return max(outage.longest, still)
