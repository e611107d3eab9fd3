"""The leaderboard: standings of every evaluated model, comparisons, the SVG chart, its pages over HTTP.
Imports `cheems`, `services.store`, `services.web`, the evaluator's core and, of `pipeline`, only a run's item keys."""
