"""services/scorer/telemetry/reward_watch.py: per model, the served rewards' histogram and rolling gauges, for the
models loaded now, with the bench figures beside them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.scorer.telemetry.reward_watch import RewardWatch
from services.store.reads import BenchRewards
from tests.services.scorer.telemetry.scraping import labelled, promtool_check, value


def test_each_model_has_its_own_figures_and_only_loaded_models_are_exported() -> None:
    registry = CollectorRegistry()
    loaded = ["a", "b"]
    bench = {"a": BenchRewards("run-1", 10, 0.5, 1.25)}
    watch = RewardWatch(registry, window=3, bench=bench.get, models=lambda: loaded)
    watch.observe("a", [1.0, 2.0, 4.0, 8.0], [10, 20, 40, 70])
    watch.observe("b", [-1.0], [5])
    watch.observe("gone", [3.0, 1.0], [1, 2])
    text = generate_latest(registry).decode()
    x, y = np.array([2.0, 4.0, 8.0]), np.array([20, 40, 70])
    assert value(text, "cheems_scorer_reward_mean", model_id="a") == pytest.approx(np.mean(x))
    assert value(text, "cheems_scorer_reward_std", model_id="a") == pytest.approx(np.std(x))
    assert value(text, "cheems_scorer_reward_length_correlation", model_id="a") == pytest.approx(
        np.corrcoef(x, y)[0, 1]
    )
    assert value(text, "cheems_scorer_reward_window_rewards", model_id="a") == 3
    assert value(text, "cheems_scorer_reward_count", model_id="a") == 4  # the histogram keeps every reward
    assert value(text, "cheems_scorer_reward_bucket", model_id="a", le="2.0") == 2
    assert (
        value(text, "cheems_scorer_reward_bench_mean", model_id="a"),
        value(text, "cheems_scorer_reward_bench_std", model_id="a"),
    ) == (0.5, 1.25)
    # b: one reward, no correlation yet, no bench figures
    assert value(text, "cheems_scorer_reward_mean", model_id="b") == -1.0
    assert labelled(text, "cheems_scorer_reward_length_correlation", model_id="b") == []
    assert labelled(text, "cheems_scorer_reward_bench_mean", model_id="b") == []
    assert labelled(text, "cheems_scorer_reward_mean", model_id="gone") == []  # not loaded now
    promtool_check(text)


def test_a_reward_that_is_not_finite_is_left_out() -> None:
    registry = CollectorRegistry()
    watch = RewardWatch(registry, window=4, models=lambda: ["a"])
    watch.observe("a", [1.0, math.nan, 3.0, math.inf], [1, 2, 3, 4])
    figures = watch.figures("a")
    assert figures is not None and (figures.count, figures.mean) == (2, 2.0)
    assert value(generate_latest(registry).decode(), "cheems_scorer_reward_count", model_id="a") == 2
    assert watch.figures("never") is None
