"""The command line, the top floor of the house: one module per command group, each a thin call into
the package that owns the work. Entry point: `cheems = cheems_cli.main:app`.
"""

import cheems  # noqa: F401  (first: sets GRPC_ENABLE_FORK_SUPPORT before grpc loads; see cheems/__init__.py)
