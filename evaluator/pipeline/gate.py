"""The promotion gate: a model's CheemsBench result decides whether it may serve RLHF clients.

    policy = GatePolicy(mode="auto", min_gain=0.0, max_drop=0.02)
    decide(candidate_result, production_result, policy)   # pure: Decision("promote" | "reject" | "hold", why, figures)
    Gate(engine, policy).consumer(bootstrap).poll_once()   # cheems.eval-results.v1 -> lifecycle steps

Each succeeded evaluation of a candidate makes it `evaluated`, with its figures. Under `manual` (the default)
that is all: a person promotes (`cheems models promote`). Under `auto` the first model ever evaluated becomes
production; a later one is promoted when its Overall is at least production's plus `min_gain` and no subset's
(Acc. + Exact.) / 2 falls more than `max_drop` below production's, and rejected otherwise, with the figures
that failed it. `auto` decides alone only for the models the training service made (source "training"): a
model registered by hand (RegisterModel, `cheems models register`: any checkpoint an operator names) is
evaluated and then held for an admin to promote, unless the policy says `registered="gate"`. The policy is
the evaluation service's configuration (`cheems service evaluation --promotion --registered`), which whoever
runs the service sets; no request changes it, so registering a model never chooses that it goes to
production. Production's figures are those of its newest succeeded run on the same bench files; without
one, the candidate is held (evaluated, not decided) and the reason logged. A failed evaluation decides
nothing. The evaluation, the decision and their events are one transaction, so a redelivered result finds
the model decided and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.bus import topics
from services.bus.client import EventConsumer
from services.models.lifecycle import ModelLifecycle
from services.store import lifecycle
from services.store.lifecycle import Change
from services.store.models import EvalRun

log = logging.getLogger(__name__)
GATE_GROUP = "cheems-gate"
ACTOR = {"auto": "policy:auto", "manual": "policy:manual"}


@dataclass(frozen=True)
class GatePolicy:
    """mode: "manual" (a person promotes) or "auto"; min_gain: Overall over production's needed to promote;
    max_drop: the most any subset's (Acc. + Exact.) / 2 may fall below production's; registered: what `auto`
    does with a model registered by hand, "hold" (evaluated, an admin promotes) or "gate" (decided like the
    training service's own)."""

    mode: Literal["manual", "auto"] = "manual"
    min_gain: float = 0.0
    max_drop: float = 0.02
    group: str = GATE_GROUP
    registered: Literal["hold", "gate"] = "hold"

    def __post_init__(self) -> None:
        if self.mode not in ("manual", "auto"):
            raise ValueError(f"GatePolicy.mode: 'manual' or 'auto', got {self.mode!r}")
        if not -1.0 <= self.min_gain <= 1.0:
            raise ValueError(f"GatePolicy.min_gain: within [-1, 1], got {self.min_gain}")
        if not 0.0 <= self.max_drop <= 1.0:
            raise ValueError(f"GatePolicy.max_drop: within [0, 1], got {self.max_drop}")
        if self.registered not in ("hold", "gate"):
            raise ValueError(f"GatePolicy.registered: 'hold' or 'gate', got {self.registered!r}")


@dataclass(frozen=True)
class Decision:
    action: Literal["promote", "reject", "hold"]
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)


def subset_scores(result: Mapping[str, Any]) -> dict[str, float]:
    """{subset: (accuracy + exact match) / 2} of a stored result."""
    return {
        name: (float(s["accuracy"]) + float(s["exact_match"])) / 2 for name, s in (result.get("subsets") or {}).items()
    }


def decide(candidate: Mapping[str, Any], production: Mapping[str, Any] | None, policy: GatePolicy) -> Decision:
    """What `policy` does with a candidate's result, given production's (None: no production model yet)."""
    overall = float(candidate["overall"])
    if policy.mode == "manual":
        return Decision("hold", "manual promotion: a person decides", {"overall": overall})
    if production is None:
        return Decision("promote", "the first model evaluated", {"overall": overall})
    base = float(production["overall"])
    mine, theirs = subset_scores(candidate), subset_scores(production)
    drops = {name: round(theirs[name] - mine.get(name, 0.0), 6) for name in theirs}
    figures = {"overall": overall, "production_overall": base, "gain": round(overall - base, 6), "drops": drops}
    failed = []
    if overall < base + policy.min_gain:
        failed.append(f"Overall {overall:.4f} < production's {base:.4f} + min_gain {policy.min_gain:g}")
    failed += [
        f"{name} (Acc.+Exact.)/2 fell {drop:.4f} > max_drop {policy.max_drop:g}"
        for name, drop in sorted(drops.items())
        if drop > policy.max_drop
    ]
    if failed:
        return Decision("reject", "; ".join(failed), figures)
    return Decision("promote", f"Overall {overall:.4f} vs production's {base:.4f}", figures)


def newest_result(session: Session, model_id: str, bench: list[str]) -> Mapping[str, Any] | None:
    """The result of the model's newest succeeded run on the same bench files."""
    runs = session.scalars(
        select(EvalRun)
        .where(EvalRun.model_id == model_id, EvalRun.state == "succeeded")
        .order_by(EvalRun.created_at.desc())
    )
    return next((run.result for run in runs if list(run.bench_files) == bench and run.result), None)


class Gate:
    """Applies the policy to each model's first succeeded evaluation (`consumer`: fed by cheems.eval-results.v1)."""

    def __init__(self, engine: Engine, policy: GatePolicy, models: ModelLifecycle | None = None) -> None:
        self.engine, self.policy = engine, policy
        self.models = models or ModelLifecycle(engine)

    def consumer(self, bootstrap: str) -> EventConsumer:
        return EventConsumer(bootstrap, [topics.EVAL_RESULTS], self.policy.group, self.handle)

    def handle(self, topic: str, key: str, event: Any) -> None:
        run = event.run
        if run.model_id and run.state == 3:  # RUN_STATE_SUCCEEDED
            self.apply(run.run_id)

    def apply(self, run_id: str) -> list[Change]:
        """The policy's steps for the run's model (none when it is no longer a candidate: decided already)."""
        return self.models.apply(lambda session: self._steps(session, run_id))

    def _steps(self, session: Session, run_id: str) -> list[Change]:
        run = session.get(EvalRun, run_id)
        if run is None or run.model_id is None or run.state != "succeeded" or not run.result:
            return []
        model = lifecycle.get_model(session, run.model_id)
        if model.state != "candidate":
            return []
        actor, bench = ACTOR[self.policy.mode], list(run.bench_files)
        current = lifecycle.production(session)
        theirs = newest_result(session, current.id, bench) if current is not None else None
        if current is not None and theirs is None and self.policy.mode == "auto":
            decision = Decision("hold", f"production ({current.id}) has no result on {bench} to compare with")
        else:
            decision = decide(run.result, theirs, self.policy)
        if decision.action == "promote" and model.source != "training" and self.policy.registered == "hold":
            why = "registered by hand, not made by the training service: an admin promotes it (cheems models promote)"
            decision = Decision("hold", f"{decision.reason}; {why}", decision.figures)
        changes = lifecycle.mark_evaluated(session, model.id, actor, f"run {run_id}", **decision.figures)
        if decision.action == "promote":
            changes += lifecycle.promote(session, model.id, actor, decision.reason)
        elif decision.action == "reject":
            changes += lifecycle.reject(session, model.id, actor, decision.reason, **decision.figures)
        log.info("gate (%s): model %s %s: %s", self.policy.mode, model.id, decision.action, decision.reason)
        return changes
