"""Triton: the reward models served by one Triton server (PyTriton, explicit model control) or a stock one, its
processes and health. Imports only `cheems` (model loading and forward): nothing else of the scorer."""
