"""Triton: the reward model served by a Triton server (PyTriton or a stock server), its processes and health.
Imports only `cheems` (model loading and forward): nothing else of the scorer, so the edges and `models` build on it."""
