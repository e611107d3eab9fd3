"""What the calls say: latency percentiles per RPC, errors by status, the team's annotations/s, and the p99 per
third of the run (flat as the queue drains and annotations accumulate?); the table printed. Pure.

    figures = rpc_figures(calls, seconds)     # {"ListTasks": {"count", "p50_ms", ..., "errors", "thirds"}, ...}
    print(table(run))                          # run: one size's JSON record (`annotation_queue_bench.py`)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from annotation_queue.annotators import Call

RPCS = ("ListTasks", "SubmitAnnotation")
WINDOWS = 3  # the run cut in thirds by each call's start


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile `q` (0-100) of `values` (0.0 when there are none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def latency(seconds: Sequence[float]) -> dict[str, Any]:
    """count, p50/p90/p99/max in milliseconds."""
    ms = [s * 1000 for s in seconds]
    spread = {f"p{q}_ms": round(percentile(ms, q), 1) for q in (50, 90, 99)}
    return {"count": len(ms), **spread, "max_ms": round(max(ms, default=0.0), 1)}


def rpc_figures(calls: Sequence[Call], seconds: float) -> dict[str, dict[str, Any]]:
    """Per RPC: latency of every call (failed ones too: a deadline is a latency), errors by status code, and the
    latency of the calls begun in each third of `seconds`."""
    out = {}
    for rpc in RPCS:
        mine = [c for c in calls if c[0] == rpc]
        thirds: list[list[float]] = [[] for _ in range(WINDOWS)]
        for _, start, took, _ in mine:
            thirds[min(WINDOWS - 1, int(start / seconds * WINDOWS))].append(took)  # a late start: the last third
        errors = Counter(c[3] for c in mine if c[3] != "OK")
        out[rpc] = latency([c[2] for c in mine]) | {"errors": dict(sorted(errors.items()))}
        out[rpc]["thirds"] = [latency(t) for t in thirds]
    return out


def table(run: dict[str, Any]) -> str:
    """A size's run as printed: the header, one row per RPC, the team's rate and the checks."""
    filled, cpu = run["filled"], run["cpu"]
    done = f", {filled['annotations']:,} annotated before" if filled["annotations"] else ""
    lines = [
        f"{run['db']}, {filled['prompts']:,} prompts x {run['responses']} ({filled['tasks']:,} tasks{done}), "
        f"{run['annotators']} annotators, limit {run['limit']}, {run['seconds']:.0f} s; "
        f"filled in {filled['seconds']:.1f} s + ANALYZE {filled['analyze_seconds']:.1f} s",
        f"load {cpu['load_before'][0]:.2f} -> {cpu['load_after'][0]:.2f}; during the run {cpu['busy_cores']} of "
        f"{run['cpus']} cores busy, CPU {cpu['server_cpu_s']} s in the server, {cpu['clients_cpu_s']} s in the clients",
        f"{'rpc':<18}{'calls':>7}{'p50 ms':>10}{'p90 ms':>10}{'p99 ms':>10}{'max ms':>10}"
        f"   p99 by third (ms)        errors",
    ]
    for rpc, f in run["rpcs"].items():
        thirds = " / ".join(f"{t['p99_ms']:.0f}" for t in f["thirds"])
        errors = ", ".join(f"{k} {n}" for k, n in f["errors"].items()) or "none"
        lines.append(
            f"{rpc:<18}{f['count']:>7}{f['p50_ms']:>10.1f}{f['p90_ms']:>10.1f}{f['p99_ms']:>10.1f}{f['max_ms']:>10.1f}"
            f"   {thirds:<24} {errors}"
        )
    team = run["team"]
    lines.append(
        f"annotations stored: {team['stored']:,} ({team['per_second']:.1f}/s for the team; "
        f"{team['empty_listings']} empty listings)"
    )
    checks = run["checks"]
    verdict = "passed" if checks["passed"] else "FAILED"
    lines.append(
        f"checks {verdict}: {checks['tasks_annotated_twice']} tasks annotated twice, "
        f"{checks['tasks_listed_to_two']} listed to two annotators, "
        f"{checks['prompts_over_ones_share']} prompts with a person over their share, "
        f"{checks['tasks_done']:,} tasks done for {checks['annotations']:,} annotations"
    )
    return "\n".join(lines)
