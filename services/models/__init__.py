"""The model registry's operations: lifecycle steps stored and announced together, the checkpoint check.
Imports `cheems`, `services.store` and `services.bus`; used by the training service, the evaluation gate, the CLI."""
