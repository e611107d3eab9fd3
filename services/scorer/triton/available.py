"""Whether this Python can serve through Triton as configured, checked before anything loads.

Starting Triton (`--backend triton`, the default, without `--triton-url`) takes PyTriton, the `triton`
extra: it needs numpy<2, which GPU hosts' images no longer have. A Triton at `--triton-url` is reached with
tritonclient, a dependency of every install; `--backend torch` needs neither.
"""

from __future__ import annotations

from cheems.extras import need

INSTEAD = "serve with --backend torch, or give --triton-url HOST:PORT of a running Triton"


def require_triton(backend: str, triton_url: str) -> None:
    """Raise `cheems.extras.MissingExtra` (one line: the options above and the pip command) when the
    backend would start Triton and PyTriton is not installed."""
    if backend == "triton" and not triton_url:
        need("triton", instead=INSTEAD)
