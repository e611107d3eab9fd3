"""Step figures read in one go: the same numbers as reading each micro-step's loss at once."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.loss import bt_loss
from trainer.meter import Meter
from trainer.steplog import StepLog, Totals


def test_totals_weight_the_parts_as_their_backward_did_and_flush_reads_plain_floats() -> None:
    a = bt_loss(torch.tensor([1.0, 0.0, 2.0]), [(0, 1), (2, 1)], reg_coef=0.1)
    b = bt_loss(torch.tensor([-1.0, 0.5]), [(0, 1)], reg_coef=0.1)
    totals = Totals()
    totals.add(a, 0.5, tokens=30, responses=3)
    totals.add(b, 0.5, tokens=20, responses=2)
    log = StepLog()
    log.add(totals.record(step=1, grad_norm=torch.tensor(2.5)))
    assert isinstance(log.pending[0]["loss"], torch.Tensor)  # nothing read yet
    (record,) = log.flush()
    assert record["loss"] == pytest.approx(a.loss.item() / 2 + b.loss.item() / 2, abs=1e-6)
    assert record["bt"] == pytest.approx(a.bt.item() / 2 + b.bt.item() / 2, abs=1e-6)
    assert record["accuracy"] == pytest.approx(2 / 3)  # 2 of a's pairs right, b's one wrong
    assert (record["pairs"], record["tokens"], record["responses"], record["forwards"]) == (3, 50, 5, 2)
    assert record["grad_norm"] == 2.5 and record["step"] == 1
    assert all(type(v) in (int, float) for k, v in record.items())
    assert record["seconds"] > 0 and record["tokens_per_s"] == pytest.approx(50 / record["seconds"])
    assert log.pending == []


def test_a_step_without_pairs_has_no_accuracy() -> None:
    totals = Totals()
    totals.add(bt_loss(torch.tensor([1.0]), []), 1.0, tokens=4, responses=1)
    (record,) = StepLog([totals.record(step=1)]).flush()
    assert math.isnan(record["accuracy"]) and record["pairs"] == 0


def test_one_flush_reads_every_pending_step_and_shares_the_time_between_them() -> None:
    log = StepLog()
    for step in range(1, 4):
        totals = Totals()
        totals.add(bt_loss(torch.tensor([float(step), 0.0]), [(0, 1)], reg_coef=0.0), 1.0, tokens=10, responses=2)
        log.add(totals.record(step=step))
    records = log.flush()
    assert [r["step"] for r in records] == [1, 2, 3]
    assert len({r["seconds"] for r in records}) == 1
    assert records[0]["loss"] > records[2]["loss"]  # a wider margin, a smaller loss


def test_margin_and_the_rewards_mean_and_std_cover_every_forward_of_the_step() -> None:
    first, second = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([-1.0, 0.5])
    totals = Totals()
    totals.add(bt_loss(first, [(0, 1), (2, 1)]), 0.5, tokens=30, responses=3)
    totals.add(bt_loss(second, [(1, 0)]), 0.5, tokens=20, responses=2)
    (record,) = StepLog([totals.record(step=1)]).flush()
    every = torch.cat([first, second])
    assert record["margin"] == pytest.approx((1.0 + 2.0 + 1.5) / 3)  # r_w - r_l of each pair, pairs weighted alike
    assert record["reward_mean"] == pytest.approx(every.mean().item())
    assert record["reward_std"] == pytest.approx(every.std(unbiased=False).item(), abs=1e-6)


def test_a_meter_stamps_each_step_with_memory_and_each_flush_with_mfu() -> None:
    meter = Meter(torch.device("cpu"), flops_per_token=6e6, peak_flops=1e12, planned_bytes=123)
    log = StepLog(meter=meter)
    totals = Totals()
    totals.add(bt_loss(torch.tensor([1.0, 0.0]), [(0, 1)]), 1.0, tokens=10, responses=2)
    log.add(totals.record(step=1))
    assert log.pending[0]["memory_peak_bytes"] > 0 and log.pending[0]["memory_planned_bytes"] == 123
    (record,) = log.flush()
    assert record["mfu"] == pytest.approx(record["tokens_per_s"] * 6e6 / 1e12)
