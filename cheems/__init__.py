"""Cheems: build and evaluate Chinese reward models.

Shared core used by every service: the official jsonl formats (`cheems.bench`,
`cheems.preference`), errors, and the generated protobuf package `cheems.v1`.
"""

__version__ = "0.1.0"
