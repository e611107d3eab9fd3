"""Annotation: human triple-wise and AI pairwise judgments turned into consistent partial rankings.

Pure modules: `resolve` (Algorithm 1), `protocol` (triple-wise tasks), `judge` + `judge_prompt`
(AI pairwise verdicts), `distant` (distant supervision, length debias), `filters`, `export`,
`simulate`. File formats and CLI steps: `annotation_file`, `resolve_file`, `commands`. The gRPC
service: `service` (transactions over `services.store`) and `server` (the adapter).
"""
