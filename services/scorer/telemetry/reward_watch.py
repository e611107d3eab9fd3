"""The reward watch: what each model is rewarding now, beside what it rewarded on its own bench.

    watch = RewardWatch(registry, window=1024, bench=BenchCache(store_bench(url)), models=lambda: ["m-1"])
    watch.observe("m-1", rewards=[0.3, -1.2], lengths=[412, 97])   # each served reward, its response's length
    watch.figures("m-1")    # WatchFigures(count, mean, std, length_correlation) over the last `window` rewards

Per model id it exports (Prometheus, at each scrape, for the models loaded now):

- `cheems_scorer_reward` (histogram): every reward served;
- `cheems_scorer_reward_mean`, `cheems_scorer_reward_std` (gauges): over the last `window` rewards served;
- `cheems_scorer_reward_length_correlation` (gauge): Pearson's r between those rewards and the length of their
  responses in characters (a Score response's text; a /get_reward query's text after its prompt when the call
  gives `prompts`, else the whole query), the classic sign of a policy learning that longer pays; absent until
  two rewards of different lengths and values are held;
- `cheems_scorer_reward_window_rewards` (gauge): how many rewards those figures are over (alerts wait for a full
  window);
- `cheems_scorer_reward_bench_mean`, `cheems_scorer_reward_bench_std` (gauges): the rewards the model gave on its
  newest CheemsBench evaluation in the store (`bench.BenchCache`); absent when the scorer has no store or the
  model was never evaluated through it.

A reward that is not finite is left out of all of them (one NaN would spoil a window's sums).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.scorer.telemetry.bench import BenchLookup
from services.scorer.telemetry.rolling import RollingStats

WINDOW = 1024  # rewards the rolling figures are over
# RMs' rewards are unbounded logits; trained Bradley-Terry heads put most within a few units of zero
REWARD_BUCKETS = (-10.0, -5.0, -3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)


@dataclass(frozen=True)
class WatchFigures:
    """A model's rolling figures: rewards held, their mean and std, and their correlation with length (None:
    undefined yet)."""

    count: int
    mean: float | None
    std: float | None
    length_correlation: float | None


class RewardWatch(Collector):
    """Rolling statistics of the rewards served, per model; registered in `registry` as the gauges' collector."""

    def __init__(
        self,
        registry: CollectorRegistry,
        window: int = WINDOW,
        bench: BenchLookup | None = None,
        models: Callable[[], Iterable[str]] = lambda: (),
    ) -> None:
        """`bench`: a model's bench rewards (None: no store); `models`: the ids loaded now (the gauges' models)."""
        self.window = window
        self.bench = bench
        self.models = models
        self.histogram = Histogram(
            "cheems_scorer_reward",
            "Rewards served, per model",
            ["model_id"],
            buckets=REWARD_BUCKETS,
            registry=registry,
        )
        self._stats: dict[str, RollingStats] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, model_id: str, rewards: Sequence[float], lengths: Sequence[int]) -> None:
        """Rewards `model_id` served, with the lengths (characters) of the responses they scored."""
        pairs = [(r, n) for r, n in zip(rewards, lengths, strict=True) if math.isfinite(r)]
        child = self.histogram.labels(model_id)
        for reward, _ in pairs:
            child.observe(reward)
        with self._lock:
            stats = self._stats.get(model_id)
            if stats is None:
                stats = self._stats[model_id] = RollingStats(self.window)
            for reward, length in pairs:
                stats.add(reward, length)

    def figures(self, model_id: str) -> WatchFigures | None:
        """The model's rolling figures now; None before it served a reward."""
        with self._lock:
            stats = self._stats.get(model_id)
            if stats is None:
                return None
            return WatchFigures(stats.count, stats.mean, stats.std, stats.correlation)

    def describe(self) -> Iterator[Metric]:
        """The gauges' families, empty (what the registry checks names with, without reading the store)."""
        yield from _families().values()

    def collect(self) -> Iterator[Metric]:
        families = _families()
        for model_id in dict.fromkeys(self.models()):
            figures = self.figures(model_id)
            if figures is not None:
                families["window"].add_metric([model_id], figures.count)
                for name in ("mean", "std", "length_correlation"):
                    value = getattr(figures, name)
                    if value is not None:
                        families[name].add_metric([model_id], value)
            found = self.bench(model_id) if self.bench is not None else None
            if found is not None:
                families["bench_mean"].add_metric([model_id], found.mean)
                families["bench_std"].add_metric([model_id], found.std)
        yield from families.values()


GAUGES = {  # key: (name, help)
    "mean": ("cheems_scorer_reward_mean", "Mean of the last rewards served"),
    "std": ("cheems_scorer_reward_std", "Standard deviation (population) of the last rewards served"),
    "length_correlation": (
        "cheems_scorer_reward_length_correlation",
        "Pearson correlation of the last rewards served with their responses' length in characters",
    ),
    "window": ("cheems_scorer_reward_window_rewards", "Rewards the rolling figures are over"),
    "bench_mean": ("cheems_scorer_reward_bench_mean", "Mean reward the model gave on its newest CheemsBench run"),
    "bench_std": (
        "cheems_scorer_reward_bench_std",
        "Standard deviation of the rewards the model gave on its newest CheemsBench run",
    ),
}


def _families() -> dict[str, GaugeMetricFamily]:
    return {key: GaugeMetricFamily(name, text, labels=["model_id"]) for key, (name, text) in GAUGES.items()}
