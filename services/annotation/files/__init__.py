"""Annotation as files: the `cheems resolve` input, the CheemsBench file it writes, the `cheems annotate` steps.
Imports `cheems`, `annotation.algorithm` and (`annotate judge|simulate`) `judge.pairwise`, `simulation.answers`."""
