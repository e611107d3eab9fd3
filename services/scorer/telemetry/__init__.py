"""The scorer's metrics: calls, phases, tokens and batches per model (`metrics`), the reward watch
(`reward_watch`, over `rolling`; bench figures from the store, `bench`), and the engines' own metrics re-exported
(`backends`). `phases` times one call."""

from services.scorer.telemetry.metrics import Loaded, Scored, ScorerMetrics

__all__ = ["Loaded", "Scored", "ScorerMetrics"]
