"""The CheemsRM objective: Bradley-Terry over pairs plus reg_coef * mean(r^2)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainer.loss import LossParts, bt_loss


def softplus(x: float) -> float:
    """-log sigmoid(-x) = log(1 + e^x); so -log sigmoid(d) = softplus(-d)."""
    return math.log1p(math.exp(x))


def test_hand_computed_loss() -> None:
    rewards = torch.tensor([2.0, 0.0, 1.0])
    parts = bt_loss(rewards, [(0, 1), (2, 1)], reg_coef=0.1)
    bt = (softplus(-2.0) + softplus(-1.0)) / 2  # diffs 2 and 1
    reg = (4.0 + 0.0 + 1.0) / 3
    assert isinstance(parts, LossParts)
    assert parts.bt.item() == pytest.approx(bt, rel=1e-6)
    assert parts.reg.item() == pytest.approx(reg, rel=1e-6)
    assert parts.loss.item() == pytest.approx(bt + 0.1 * reg, rel=1e-6)
    expected = -F.logsigmoid(torch.tensor([2.0, 1.0])).mean() + 0.1 * rewards.pow(2).mean()
    assert parts.loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert parts.pairs == 2
    assert parts.accuracy == 1.0


def test_pair_order_is_chosen_then_rejected() -> None:
    rewards = torch.tensor([2.0, 0.0, 1.0])
    right = bt_loss(rewards, [(0, 1)], reg_coef=0.0)
    wrong = bt_loss(rewards, [(1, 0)], reg_coef=0.0)
    assert right.loss.item() == pytest.approx(softplus(-2.0), rel=1e-6)
    assert wrong.loss.item() == pytest.approx(softplus(2.0), rel=1e-6)
    assert right.accuracy == 1.0 and wrong.accuracy == 0.0


def test_reg_coef_scales_only_the_prior() -> None:
    rewards = torch.tensor([3.0, -1.0])
    a = bt_loss(rewards, [(0, 1)], reg_coef=0.0)
    b = bt_loss(rewards, [(0, 1)], reg_coef=0.5)
    assert a.bt.item() == pytest.approx(b.bt.item())
    assert a.reg.item() == pytest.approx(5.0)
    assert b.loss.item() - a.loss.item() == pytest.approx(0.5 * 5.0, rel=1e-6)


def test_margin_shifts_the_difference() -> None:
    rewards = torch.tensor([2.0, 0.0, 1.0])
    parts = bt_loss(rewards, [(0, 1), (2, 1)], reg_coef=0.0, margin=1.5)
    assert parts.bt.item() == pytest.approx((softplus(-0.5) + softplus(0.5)) / 2, rel=1e-6)
    # a margin raises the loss of the same rewards; accuracy still compares r_w and r_l
    assert parts.bt.item() > bt_loss(rewards, [(0, 1), (2, 1)], reg_coef=0.0).bt.item()
    assert parts.accuracy == 1.0


def test_accuracy_is_the_share_of_pairs_ordered_right() -> None:
    rewards = torch.tensor([1.0, 0.0, 3.0, 3.0])
    parts = bt_loss(rewards, [(0, 1), (1, 2), (2, 0), (2, 3)])
    assert parts.pairs == 4
    assert parts.accuracy == pytest.approx(2 / 4)  # (0,1) and (2,0) right; (1,2) wrong; a tie is not right


def test_a_batch_without_pairs_is_only_the_prior_and_still_has_a_gradient() -> None:
    rewards = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    parts = bt_loss(rewards, [], reg_coef=0.1)
    assert parts.pairs == 0
    assert math.isnan(parts.accuracy)
    assert parts.bt.item() == 0.0
    assert parts.loss.item() == pytest.approx(0.1 * (1 + 4 + 9) / 3, rel=1e-6)
    assert parts.bt.requires_grad  # connected to the graph even with no pairs
    parts.loss.backward()
    assert rewards.grad is not None
    assert torch.allclose(rewards.grad, 0.1 * 2 * rewards.detach() / 3)


def test_no_pairs_and_no_prior_still_backpropagates() -> None:
    rewards = torch.tensor([1.0, 2.0], requires_grad=True)
    parts = bt_loss(rewards, [], reg_coef=0.0)
    assert parts.loss.item() == 0.0
    parts.loss.backward()
    assert rewards.grad is not None
    assert torch.equal(rewards.grad, torch.zeros(2))


def test_gradient_pushes_chosen_up_and_rejected_down() -> None:
    rewards = torch.tensor([0.5, 0.7, -0.2], requires_grad=True)
    bt_loss(rewards, [(0, 1)], reg_coef=0.0).loss.backward()
    grad = rewards.grad
    assert grad is not None
    assert grad[0].item() < 0  # d loss / d r_chosen
    assert grad[1].item() > 0  # d loss / d r_rejected
    assert grad[2].item() == 0.0  # not in any pair, no prior
    # d/dr_w of -log sigmoid(r_w - r_l) = -sigmoid(r_l - r_w)
    assert grad[0].item() == pytest.approx(-torch.sigmoid(torch.tensor(0.2)).item(), rel=1e-6)
    assert grad[0].item() == pytest.approx(-grad[1].item())


def test_prior_gradient_pulls_rewards_toward_zero() -> None:
    rewards = torch.tensor([4.0, -4.0], requires_grad=True)
    bt_loss(rewards, [(0, 1)], reg_coef=1.0).loss.backward()
    assert rewards.grad is not None
    # the pair is almost satisfied, so the prior dominates: the chosen reward is pushed down
    assert rewards.grad[0].item() > 0 and rewards.grad[1].item() < 0


def test_loss_is_finite_for_large_differences() -> None:
    rewards = torch.tensor([100.0, -100.0])
    assert math.isfinite(bt_loss(rewards, [(1, 0)], reg_coef=0.0).loss.item())
    assert bt_loss(rewards, [(1, 0)], reg_coef=0.0).loss.item() == pytest.approx(200.0, rel=1e-4)


def test_margin_is_the_mean_gap_of_the_pairs_and_the_rewards_are_described() -> None:
    rewards = torch.tensor([1.0, 0.0, 3.0, 3.0], requires_grad=True)
    parts = bt_loss(rewards, [(0, 1), (1, 2), (2, 0)], margin=0.5)  # the loss's margin does not move the gap
    assert parts.margin.item() == pytest.approx((1.0 + -3.0 + 2.0) / 3)
    assert parts.reward_mean.item() == pytest.approx(7.0 / 4) and parts.responses == 4
    assert not parts.margin.requires_grad and not parts.reward_mean.requires_grad  # figures, not graph
    assert math.isnan(bt_loss(rewards, []).margin)
