"""Training datasets: recipes (which annotations become pairs; pure) and their build from the store.
Imports `cheems`, `services.*` (algorithm, store, bus, scorer tokenization) and the service's dataset message."""
