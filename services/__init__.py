"""Cheems services: each a package of pure logic modules plus a thin server adapter."""

import cheems  # noqa: F401  (first: sets GRPC_ENABLE_FORK_SUPPORT before grpc loads; see cheems/__init__.py)
