"""The whole system on one machine, above every service: `cheems up` (plan, supervisor, takeover, up), `cheems status`
(status) and the demo that runs the loop through the services."""

import cheems  # noqa: F401  (first: sets GRPC_ENABLE_FORK_SUPPORT before grpc loads; see cheems/__init__.py)
