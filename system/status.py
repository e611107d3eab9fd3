"""`cheems status`: each service's health, how much each stage of the loop holds, and the models, best first.

    report = status(engine, {"ingestion": "127.0.0.1:50052", ...})
    print(render(report))        # or json.dumps(report): the `--json` shape below

    {"services": {name: "SERVING" | "NOT_SERVING" | "UNREACHABLE"},
     "metrics": {name: "http://host:port/metrics"},   # where Prometheus scrapes each process (`cheems up`'s: "up")
     "served": [{"model_id", "dtype", "backend", "default", "in_flight",                 # the scorer's models now
                 "reward_watch": {"count", "mean", "std", "length_correlation", "bench_mean", "bench_std",
                                  "bench_run_id"} | null}] | "why not",
     "samples": int, "annotations": int, "rankings": int, "trainings": int,
     "rule_filtered": {"<rule><threshold>": int},   # responses the rule filter kept out of annotation
     "annotation_queue": {"open_triples": int, "free_triples": int, "lease_seconds", "people_per_prompt",
                          "held": [{"annotator", "tasks", "idle", "oldest_seconds"}],   # who holds open tasks
                          "unfinishable": {"prompts", "needed", "accounts"}},
     "datasets": [{"id", "recipe", "prompts", "pairs", "rankings", "supervisor_model_id", "created_at",
                   "details": {"recipe", "settings", "counts"} | null}],                          # newest first
     "models": [{"id", "path", "dataset", "dataset_recipe", "recipe", "overall", "created_at", "tracking"}],  # best 1st
     "training_runs": [{"id", "state", "step", "total_steps", "loss", "tracking"}],   # pending or running, newest 1st
     "eval_runs": [{"id", "model_id", "state", "overall", "items_scored", "items_total"}]}      # newest first

A served model's `reward_watch` is the scorer's rolling view of the rewards it served (its last `--reward-window`:
mean, std, Pearson correlation with the responses' length in characters) beside those it gave on its newest
CheemsBench run (null figures where undefined or unknown); the text report puts them next to the model's overall.
`annotation_queue` is the queue as the annotation service hands it out (`services.store.annotators`, under the
`QueueConfig` given: the service's --lease and --people-per-prompt): each person's held tasks,
how many are idle past the lease (anyone may take them), and how long ago the oldest was claimed or opened; and the
prompts with open triples that need more different people than the active accounts that annotate (the text report
says what to set).
A run's `state` is "running", "done" or "failed"; a model's `overall` is the CheemsBench Overall of its
newest finished evaluation run (null until one finishes). A dataset's `details` is how it was made
(`trainer.datasets.build.dataset_details`: each step's settings, counts per source before and after each step;
null for datasets stored before the store's revision 0009). `tracking` is where a training was reported
(`trainer.tracking`): {"tensorboard": log dir, "mlflow": run id, "wandb": run id}, null when nowhere or not known.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from services.annotation.config import QueueConfig
from services.store import annotators, lifecycle, registry, repository
from services.store.db import session_scope
from services.store.filtered import reason_counts
from system.supervisor import grpc_health

RUN_STATES = {"running": "running", "succeeded": "done", "failed": "failed"}


def status(
    engine: Engine | None,
    services: Mapping[str, str],
    timeout: float = 2.0,
    token: str = "",
    metrics: Mapping[str, str] | None = None,
    optional: Collection[str] = (),
    queue: QueueConfig | None = None,
) -> dict[str, Any]:
    """Health of each service (probed together) and, with an engine, what the store holds; `token`: the account
    the scorer is asked what it holds with (health needs none); `metrics`: each process's /metrics URL
    (`system.plan.metrics_urls`); `optional`: services that run only when configured (the AI judge), left out of
    the report, metrics URL included, when they do not answer; `queue`: the annotation service's rule."""
    with ThreadPoolExecutor(max_workers=max(1, len(services))) as pool:
        health = dict(zip(services, pool.map(lambda a: grpc_health(a, timeout), services.values()), strict=True))
    absent = {name for name in optional if health.get(name) == "UNREACHABLE"}
    health = {name: state for name, state in health.items() if name not in absent}
    urls = {name: url for name, url in (metrics or {}).items() if name not in absent}
    report: dict[str, Any] = {"services": health, "metrics": urls}
    if health.get("scorer") == "SERVING":
        report["served"] = served_models(services["scorer"], timeout, token)
    if engine is not None:
        try:
            report |= store_status(engine, queue or QueueConfig())
        except SQLAlchemyError as e:  # not migrated yet, or unreachable: the services' health still tells
            report["store_error"] = str(getattr(e, "orig", None) or e).strip().splitlines()[0]
    return report


def served_models(address: str, timeout: float, token: str = "") -> list[dict[str, Any]] | str:
    """The models the scorer holds now (its GetModelInfo, as the account of `token`), each with the dtype it computes
    in; or why not (UNAUTHENTICATED without a token the scorer takes)."""
    import grpc

    from cheems.v1 import reward_pb2, reward_pb2_grpc
    from services.channels import open_channel

    try:
        with open_channel(address, token=token) as channel:
            info = reward_pb2_grpc.RewardServiceStub(channel).GetModelInfo(
                reward_pb2.ModelInfoRequest(), timeout=timeout
            )
    except grpc.RpcError as e:
        return f"{e.code().name}: {e.details()}"
    return [
        {"model_id": m.model_id, "dtype": m.dtype, "backend": info.backend, "default": m.is_default,
         "in_flight": m.in_flight, "reward_watch": watch_json(m)}
        for m in info.models
    ]  # fmt: skip


def watch_json(model: Any) -> dict[str, Any] | None:
    """A LoadedModel's reward watch as JSON (None when the scorer has none for it); unset figures are null."""
    if not model.HasField("reward_watch"):
        return None
    w = model.reward_watch

    def optional(name: str) -> float | None:
        return getattr(w, name) if w.HasField(name) else None

    return {
        "count": w.count,
        "mean": w.mean if w.count else None,
        "std": w.std if w.count else None,
        "length_correlation": optional("length_correlation"),
        "bench_mean": optional("bench_mean"),
        "bench_std": optional("bench_std"),
        "bench_run_id": w.bench_run_id or None,
    }


def store_status(engine: Engine, queue: QueueConfig) -> dict[str, Any]:
    with session_scope(engine) as session:
        annotation_queue = queue_status(session, datetime.now(UTC), queue)
        counts = registry.stage_counts(session)
        results = registry.model_results(session)
        aliases = lifecycle.aliases(session)
        production = lifecycle.production(session)
        models = [
            {
                "id": m.id,
                "path": m.path,
                "dataset": m.dataset_id,
                "dataset_recipe": m.dataset_recipe,
                "recipe": m.recipe,
                "overall": results[m.id][1] if m.id in results else None,
                "created_at": m.created_at.isoformat(),
                "state": m.state,
                "aliases": aliases.get(m.id, []),
                "source": m.source,
                "tracking": m.tracking,
            }
            for m in registry.list_models(session)
        ]
        trainings = [
            {"id": t.id, "state": t.state, "step": t.step, "total_steps": t.total_steps, "loss": t.loss,
             "tracking": t.tracking}
            for t in registry.list_trainings(session, ("pending", "running"))
        ]  # fmt: skip
        runs = [
            {
                "id": run.id,
                "model_id": run.model_id,
                "state": RUN_STATES.get(run.state, run.state),
                "overall": (run.result or {}).get("overall") if run.state == "succeeded" else None,
                "items_scored": repository.count_scored(session, run.id),
                "items_total": run.items_total,
            }
            for run in registry.list_runs(session)
        ]
        datasets = [registry.dataset_json(d) for d in registry.list_datasets(session)]
        rule_filtered = reason_counts(session)
    models.sort(key=lambda m: (m["overall"] is not None, m["overall"] or 0.0), reverse=True)
    counts.pop("datasets", None)
    production_id = production.id if production else None
    return {
        **counts,
        "rule_filtered": rule_filtered,
        "annotation_queue": annotation_queue,
        "datasets": datasets,
        "production": production_id,
        "models": models,
        "training_runs": trainings,
        "eval_runs": runs,
    }


def queue_status(session: Any, now: datetime, queue: QueueConfig) -> dict[str, Any]:
    """The annotation queue: open and free triples, who holds what, the prompts the accounts cannot finish."""
    open_triples, free = annotators.queue_size(session, now, queue.lease)
    held = [
        {
            "annotator": h.annotator,
            "tasks": h.tasks,
            "idle": h.idle,
            "oldest_seconds": round((now - h.oldest).total_seconds()),
        }
        for h in annotators.holdings(session, now, queue.lease)
    ]
    short = annotators.unfinishable(session, queue.people_per_prompt)
    return {
        "open_triples": open_triples, "free_triples": free, "lease_seconds": queue.lease_seconds,
        "people_per_prompt": queue.people_per_prompt, "held": held,
        "unfinishable": {"prompts": short.prompts, "needed": short.needed, "accounts": short.accounts},
    }  # fmt: skip


def queue_lines(queue: Mapping[str, Any]) -> list[str]:
    """`annotation queue: 120 open triples, 95 free; held by 甲 5 (oldest 12 min, 1 idle past the lease), ...`, and
    what to set when the accounts cannot finish some prompts."""
    held = ", ".join(
        f"{h['annotator']} {h['tasks']} (oldest {h['oldest_seconds'] // 60} min"
        + (f", {h['idle']} idle past the lease" if h["idle"] else "") + ")"
        for h in queue["held"]
    )  # fmt: skip
    lines = [f"annotation queue: {queue['open_triples']} open triples, {queue['free_triples']} free; held by "
             f"{held or 'nobody'}"]  # fmt: skip
    short, rule = queue["unfinishable"], queue["people_per_prompt"]
    if short["prompts"]:
        which = "every triple a different person" if rule == 0 else f"{rule} people finish a prompt"
        fix = (f"set the annotation service's --people-per-prompt {short['accounts']} or add annotator accounts"
               if short["accounts"] else "add annotator accounts (cheems annotators add NAME)")  # fmt: skip
        lines.append(
            f"  {short['prompts']} prompts cannot be finished: one needs up to {short['needed']} different people "
            f"(--people-per-prompt {rule}: {which}) and {short['accounts']} active accounts annotate; {fix}"
        )
    return lines


def watch_line(served: Mapping[str, Any], overall: float | None) -> str:
    """One model's reward watch, served beside bench: `  reward watch m-1: served mean 0.41 std 1.20 (1024
    rewards), length r +0.12; bench mean 0.38 std 1.10, overall 0.7321`."""
    w = served["reward_watch"]

    def figure(value: float | None, sign: str = "") -> str:
        return "-" if value is None else f"{value:{sign}.3f}"

    served_part = (
        f"served mean {figure(w['mean'])} std {figure(w['std'])} ({w['count']} rewards), "
        f"length r {figure(w['length_correlation'], '+')}"
        if w["count"]
        else "nothing served yet"
    )
    bench = (
        "bench not in the store"
        if w["bench_mean"] is None
        else f"bench mean {figure(w['bench_mean'])} std {figure(w['bench_std'])}"
    )
    score = "" if overall is None else f", CheemsBench overall {overall:.4f}"
    return f"  reward watch {served['model_id']}: {served_part}; {bench}{score}"


def render(report: Mapping[str, Any]) -> str:
    """The report as text: services, stage counts, then the leaderboard."""
    lines = ["services:"]
    lines += [f"  {name:<12} {state}" for name, state in report["services"].items()]
    served = report.get("served")
    if isinstance(served, str):
        lines.append(f"scorer models: {served}")
    elif served is not None:
        held = [
            f"{m['model_id']} ({'default, ' if m['default'] else ''}{m['dtype'] or 'dtype unknown'})" for m in served
        ]
        lines.append(f"scorer models: {', '.join(held) or 'none loaded'}")
        overall_of = {m["id"]: m["overall"] for m in report.get("models", [])}
        lines += [watch_line(m, overall_of.get(m["model_id"])) for m in served if m.get("reward_watch")]
    if "store_error" in report:
        lines.append(f"store: {report['store_error']}")
    if "samples" in report:
        stages = ("samples", "annotations", "rankings", "datasets", "trainings")
        sizes = {stage: len(report[stage]) if stage == "datasets" else report[stage] for stage in stages}
        lines.append("store: " + "  ".join(f"{stage} {sizes[stage]}" for stage in stages))
        if report.get("rule_filtered"):
            shown = ", ".join(f"{reason} {n}" for reason, n in report["rule_filtered"].items())
            lines.append(f"kept out of annotation by the rule filter: {shown}")
        if "annotation_queue" in report:
            lines += queue_lines(report["annotation_queue"])
        lines.append(f"production: {report.get('production') or '(none yet)'}")
        lines.append("models (best first):")
        if not report["models"]:
            lines.append("  none yet")
        for rank, model in enumerate(report["models"], start=1):
            overall = "-" if model["overall"] is None else f"{model['overall']:.4f}"
            made = model["dataset_recipe"] or "(registered)"
            lines.append(
                f"  {rank:>2}. {model['id']:<22} overall {overall:<7} {model['state']:<10} {made:<18} {model['path']}"
            )
            if model.get("tracking"):
                lines.append(f"      reported to {reported(model['tracking'])}")
        for training in report.get("training_runs", []):
            loss = "-" if training["loss"] is None else f"{training['loss']:.4f}"
            where = f", reported to {reported(training['tracking'])}" if training["tracking"] else ""
            lines.append(
                f"training {training['id']} ({training['state']}): step {training['step']}/{training['total_steps']}"
                f", loss {loss}{where}"
            )
        running = [r for r in report["eval_runs"] if r["state"] == "running"]
        for run in running:
            lines.append(f"evaluating {run['model_id'] or '-'}: {run['items_scored']}/{run['items_total']} prompts")
    return "\n".join(lines)


def reported(tracking: Mapping[str, str]) -> str:
    """`tensorboard DIR, mlflow run ID`: where a training's figures are (trainer.tracking)."""
    kinds = {"tensorboard": "", "mlflow": "run ", "wandb": "run "}
    return ", ".join(f"{name} {kinds.get(name, '')}{value}" for name, value in tracking.items())
