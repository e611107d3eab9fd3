"""The paper's pure algorithms of annotation: triple-wise protocol, Algorithm 1, distant supervision, filters, quality.
Imports only `cheems` and third-party packages (networkx): no store, no bus, no I/O."""
