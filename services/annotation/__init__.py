"""Annotation: human triple-wise and AI pairwise judgments turned into consistent partial rankings.

- `algorithm/` (pure): `protocol` (triple-wise tasks), `resolve` (Algorithm 1), `distant` (distant
  supervision, length debias), `filters` (the rule filter), `quality` (annotators' agreement), `export`.
- the service: `service` (transactions over `services.store`), `server` (the gRPC adapter and the
  process), `intake` (sample events -> triple-wise tasks and the judge's pair tasks), `events` (annotation and
  ranking events, relayed at-least-once from the store's outbox), `submission` (the one submit path of gRPC and the
  page), `kinds` (each kind of annotation closes its own kind of task; the kind is the sender's role).
- `judge/`: `pairwise` (AI verdicts, OpenAI-compatible backends), `prompt` (the paper's judge prompt),
  `client` (the annotation service over gRPC, as the judge's service account), `worker` (open pair tasks -> AI
  verdicts).
- `web/`: the annotator's page: `workbench` (sign-in, next task, submit, admin overview), `form` (the
  submit body), `app` (JSON API and pages over HTTP), `pages` + static/.
- `files/`: `annotations` (the `cheems resolve` input), `resolve` (-> a CheemsBench file), `commands`
  (`cheems annotate ...`).
- `simulation/` (tests and the demo): `answers` (simulated people and judge from gold ranks),
  `annotators` (people working the queue over gRPC), `judge` (an OpenAI-compatible judge server).
"""
