"""Annotation: human triple-wise and AI pairwise judgments turned into consistent partial rankings.

Pure modules: `resolve` (Algorithm 1), `protocol` (triple-wise tasks), `judge` + `judge_prompt`
(AI pairwise verdicts), `distant` (distant supervision, length debias), `filters`, `export`,
`simulate`. File formats and CLI steps: `annotation_file`, `resolve_file`, `commands`. The gRPC
service: `service` (transactions over `services.store`) and `server` (the adapter and the process).
Driven by events: `intake` (sample events -> triple-wise tasks), `judge_worker` (sample events -> pair
tasks -> AI verdicts), `events` (annotation and ranking events, relayed at-least-once from the store's
outbox). Stand-ins for the demo: `simulated_judge` (an OpenAI-compatible judge answering from gold
ranks) and `simulated_annotators` (people working the queue over gRPC).

The annotator's web page: `workbench` (sign-in, each annotator's next task, submit, the admin overview),
`submission` (the one submit path, shared with gRPC), `web_form` (the page's submit body), `quality`
(agreement with rankings, share on cycles), `http_app` (JSON API and pages over HTTP), `pages` + static/.
"""
