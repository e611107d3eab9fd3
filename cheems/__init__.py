"""Cheems: build and evaluate Chinese reward models. The ground floor: imports nothing of the project.

Shared core used by every package: the official jsonl formats (`cheemsbench`, `preference`,
`rewards_file`, `responses`), the chat template and tokenization (`chat`), reward-model loading
(`model`) and forward pass (`forward`), settings (`settings`), the error tree (`errors`), and the
generated protobuf package `cheems.v1`.
"""

__version__ = "0.1.0"
