"""The soak's report: each check, each kill with its recovery (p50 and max per service), the clients' errors by
status code with the longest outage each saw; as a table for people and as JSON for tools."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from system.soak.run import SoakResult


def as_json(result: SoakResult) -> dict[str, Any]:
    ledger = result.ledger
    return {
        "ok": result.ok,
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in result.checks],
        "kills": [
            {
                "at": round(k.at, 1),
                "service": k.service,
                "process": k.process,
                "pid": k.pid,
                "recovery_s": None if k.recovery is None else round(k.recovery, 2),
            }
            for k in result.kills
        ],
        "recovery": recovery_by_service(result),
        "restart_s": None if result.restart_seconds is None else round(result.restart_seconds, 1),
        "acknowledged": {kind: len(ids) for kind, ids in sorted(ledger.acknowledged.items())},
        "calls": dict(sorted(ledger.calls.items())),
        "errors": {f"{client} {code}": n for (client, code), n in sorted(ledger.errors.items())},
        "longest_outage_s": {c: round(ledger.longest_outage(c), 1) for c in sorted({*ledger.calls, *ledger.outages})},
    }


def recovery_by_service(result: SoakResult) -> dict[str, dict[str, Any]]:
    """{service: kills, back, p50 and max seconds to answer again}."""
    times: dict[str, list[float | None]] = defaultdict(list)
    for kill in result.kills:
        times[kill.service].append(kill.recovery)
    out = {}
    for service, values in sorted(times.items()):
        back = [v for v in values if v is not None]
        out[service] = {"kills": len(values), "back": len(back),
                        "p50_s": round(statistics.median(back), 1) if back else None,
                        "max_s": round(max(back), 1) if back else None}  # fmt: skip
    return out


def render(result: SoakResult) -> str:
    report = as_json(result)
    lines = ["", "check                      result  detail"]
    lines += [f"{c['name']:<26} {'ok' if c['ok'] else 'FAILED':<7} {c['detail']}" for c in report["checks"]]
    lines += ["", "service       kills  back  recovery p50   max"]
    for service, r in report["recovery"].items():
        p50 = "-" if r["p50_s"] is None else f"{r['p50_s']:.1f} s"
        top = "-" if r["max_s"] is None else f"{r['max_s']:.1f} s"
        lines.append(f"{service:<13} {r['kills']:>5} {r['back']:>5}  {p50:>12} {top:>7}")
    if report["restart_s"] is not None:
        lines.append(f"cheems up SIGKILLed and started again: healthy in {report['restart_s']:.1f} s")
    lines += ["", "client        calls ok  errors (by code)                       longest outage"]
    clients = sorted({*report["calls"], *(key.split(" ", 1)[0] for key in report["errors"])})
    for client in clients:
        calls = report["calls"].get(client, 0)
        errors = ", ".join(
            f"{key.split(' ', 1)[1]} {n}" for key, n in report["errors"].items() if key.startswith(client + " ")
        )
        lines.append(f"{client:<13} {calls:>8}  {errors or 'none':<38} {report['longest_outage_s'][client]:.1f} s")
    acked = ", ".join(f"{n} {kind}" for kind, n in report["acknowledged"].items())
    lines += ["", f"acknowledged: {acked or 'nothing'}", "", "SOAK PASSED" if result.ok else "SOAK FAILED"]
    return "\n".join(lines)
