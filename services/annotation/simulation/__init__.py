"""Stand-ins for people and paid APIs (tests, demo): answers from gold ranks, annotators over gRPC, a judge server.
Imports `cheems` (the gRPC stubs included) and `annotation.algorithm` only."""
