"""The rewards each model gave on its own CheemsBench evaluation: what the reward watch compares served rewards with.

    bench = BenchCache(store_bench("sqlite:///cheems.db"))   # the scorer's --db (as --follow and --accounts read)
    bench("m-3f2a")         # BenchRewards(run_id, count, mean, std), or None: never evaluated through the store

The figures come from the store: the scores an evaluation run stored per prompt (`eval_scores`) of the model's
newest succeeded run (`services.store.reads.bench_rewards`). A scorer given no store has none, and exports no
bench gauges. Each model's figures are read at most once per `ttl` seconds (a scrape asks for them), so a model
evaluated after it was loaded shows them within that; a store that cannot be read leaves a warning in the log and
no figures, and the scrape goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from services.store.reads import BenchRewards

log = logging.getLogger(__name__)
TTL = 300.0  # seconds a model's figures are kept before the store is asked again

BenchLookup = Callable[[str], BenchRewards | None]


def store_bench(url: str) -> BenchLookup:
    """model id -> its bench rewards, read from the store at `url` (read-only units: never behind a writer)."""
    from services.store.db import StoreConfig, create_engine_for, read_scope
    from services.store.reads import bench_rewards

    engine = create_engine_for(StoreConfig(url))

    def lookup(model_id: str) -> BenchRewards | None:
        with read_scope(engine) as session:
            return bench_rewards(session, model_id)

    return lookup


class BenchCache:
    """`lookup`'s answers kept `ttl` seconds per model; a failed lookup is logged and answers None (tried again after
    `ttl` too, so a store that is down is not asked at every scrape)."""

    def __init__(self, lookup: BenchLookup, ttl: float = TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.lookup, self.ttl, self.clock = lookup, ttl, clock
        self._kept: dict[str, tuple[float, BenchRewards | None]] = {}
        self._lock = threading.Lock()

    def __call__(self, model_id: str) -> BenchRewards | None:
        now = self.clock()
        with self._lock:
            kept = self._kept.get(model_id)
        if kept is not None and now - kept[0] < self.ttl:
            return kept[1]
        try:
            found = self.lookup(model_id)
        except Exception as e:  # the scrape goes on without the figures
            why = (str(e) or type(e).__name__).splitlines()[0]
            log.warning("the bench rewards of %s could not be read from the store: %s", model_id, why)
            found = None
        with self._lock:
            self._kept[model_id] = (now, found)
        return found
