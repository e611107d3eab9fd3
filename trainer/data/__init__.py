"""Training data: files read into prompt groups (`groups`), encoded into token arrays (`tokens`), cached on disk
and memory-mapped by every rank (`cache`). Imports `cheems` only."""

from trainer.data.groups import LengthPolicy, PromptGroup, read_groups
from trainer.data.tokens import Dataset, Example, Examples, LengthStats, tokenize_groups

__all__ = [
    "Dataset",
    "Example",
    "Examples",
    "LengthPolicy",
    "LengthStats",
    "PromptGroup",
    "read_groups",
    "tokenize_groups",
]
