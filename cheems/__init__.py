"""Cheems: build and evaluate Chinese reward models. The ground floor: imports nothing of the project.

Shared core used by every package: the data formats (`formats`: the official CheemsBench and
CheemsPreference jsonl, rewards files, the community's layouts, jsonl / JSON array / Parquet files),
the chat template and tokenization (`chat`), reward-model loading (`model`), the forward pass (`forward`)
with prefix sharing (`packing`), settings (`settings`), secrets (`credentials`), the error tree
(`errors`), the bundled sample (`sample_bench`), and the generated protobuf package `cheems.v1`.
"""

__version__ = "0.1.0"
