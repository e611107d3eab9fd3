"""The soak's verdicts on made-up evidence: each check fails on the fault it exists for (so a passing soak means
something), and the ledger counts what the clients were told."""

from __future__ import annotations

import time

import pytest

from system.plan import Process
from system.soak import checks
from system.soak.chaos import Kill, service_of
from system.soak.config import SoakConfig
from system.soak.ledger import Ledger
from system.soak.report import recovery_by_service, render
from system.soak.run import SoakResult


def test_samples_lost_or_doubled_fail() -> None:
    assert checks.samples_stored({"问一": ["p1"], "问二": ["p2"]}).ok
    lost = checks.samples_stored({"问一": ["p1"], "问二": []})
    assert not lost.ok and "1 lost" in lost.detail and "问二" in lost.detail
    assert not checks.samples_stored({"问一": ["p1", "p9"]}).ok


def test_sample_events_unconsumed_or_redelivered_fail() -> None:
    tasks = {"p1": [(("r1", "r2", "r3"), 0)], "p2": [(("r1", "r2", "r4"), 0)]}
    assert checks.tasks_made(["p1", "p2"], tasks).ok
    assert not checks.tasks_made(["p1", "p2"], {"p1": tasks["p1"], "p2": []}).ok  # the event never became tasks
    doubled = {**tasks, "p2": [(("r1", "r2", "r4"), 0), (("r1", "r2", "r4"), 0)]}  # a redelivery made them again
    result = checks.tasks_made(["p1", "p2"], doubled)
    assert not result.ok and "1 with a task made twice" in result.detail
    assert checks.tasks_made(["p1"], {"p1": [(("r1", "r2", "r3"), 0), (("r1", "r2", "r3"), 1)]}).ok  # a copy


def test_annotations_and_runs() -> None:
    assert checks.annotations_stored(["a1", "a2"], {"a1": True, "a2": True}).ok
    assert not checks.annotations_stored(["a1", "a2"], {"a1": True}).ok
    assert not checks.annotations_stored(["a1"], {"a1": False}).ok  # voided by nobody the soak knows
    assert checks.runs_finished(["e1"], {"e1": "succeeded"}).ok
    assert not checks.runs_finished(["e1", "e2"], {"e1": "succeeded"}).ok
    assert not checks.runs_finished(["e1"], {"e1": "running"}).ok


def test_the_ledger_counts_errors_and_the_longest_outage() -> None:
    ledger = Ledger()
    ledger.failed("score", "UNAVAILABLE")
    time.sleep(0.05)
    ledger.failed("score", "UNAVAILABLE")
    ledger.ok("score")
    ledger.ok("score")
    ledger.ack("samples", "问一", "问二")
    assert ledger.errors[("score", "UNAVAILABLE")] == 2 and ledger.calls["score"] == 2
    assert 0.05 <= ledger.longest_outage("score") < 5
    assert ledger.acked("samples") == {"问一", "问二"}


def test_a_client_refused_for_anything_but_an_outage_or_never_answered_fails() -> None:
    ledger = Ledger()
    for client in ("ingest", "score", "annotators"):
        ledger.ok(client)
    ledger.failed("score", "UNAVAILABLE")
    ledger.failed("annotators", "ALREADY_EXISTS")  # the task went to someone else: honest
    assert checks.clients_served(ledger, ["ingest", "score", "annotators"]).ok
    assert not checks.clients_served(ledger, ["ingest", "evaluate"]).ok  # StartRun never answered OK
    ledger.failed("ingest", "INVALID_ARGUMENT")
    refused = checks.clients_served(ledger, ["ingest"])
    assert not refused.ok and "ingest INVALID_ARGUMENT" in refused.detail


def test_the_report_names_what_failed_and_each_service_recovery() -> None:
    result = SoakResult(
        checks=[checks.Check("samples", False, "3 acknowledged, 1 lost")],
        kills=[
            Kill(10, "broker", 1, "tansu", 2.0),
            Kill(30, "broker", 2, "python", 4.0),
            Kill(50, "scorer", 3, "x", None),
        ],
    )
    assert recovery_by_service(result) == {
        "broker": {"kills": 2, "back": 2, "p50_s": 3.0, "max_s": 4.0},
        "scorer": {"kills": 1, "back": 0, "p50_s": None, "max_s": None},
    }
    text = render(result)
    assert "FAILED" in text and text.rstrip().endswith("SOAK FAILED") and not result.ok
    assert not SoakResult().ok  # no checks ran: not a pass


def test_a_victim_belongs_to_the_service_whose_command_it_runs() -> None:
    plan = [
        Process("broker", ("dev", "broker", "--port", "9092"), 9092, "tcp"),
        Process("m", ("db", "upgrade"), once=True),
    ]
    assert service_of(["/py", "-m", "cheems_cli", "dev", "broker", "--port", "9092"], plan) == "broker"
    assert service_of(["/py", "-m", "cheems_cli", "db", "upgrade"], plan) is None  # a one-off step is no service
    assert service_of(["tansu", "broker"], plan) is None


@pytest.mark.parametrize("field", ["kill_every", "score_every", "ingest_rate"])
def test_config_names_a_bad_field(field: str) -> None:
    with pytest.raises(ValueError, match=f"SoakConfig.{field}"):
        SoakConfig(**{field: 0})
    with pytest.raises(ValueError, match="annotators"):
        SoakConfig(annotators=3)
