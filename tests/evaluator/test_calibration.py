"""The official-style expected calibration error, against hand-computed values."""

import math

import pytest

from evaluator.calibration import expected_calibration_error


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_no_pairs_has_no_ece() -> None:
    assert expected_calibration_error([]) is None


def test_two_bins_hand_computed() -> None:
    # max |m| = 4, 2 bins of width 2: bin0 {1, -1}, bin1 {3, 4} (4 = the max, kept in the last bin)
    ece = expected_calibration_error([1.0, -1.0, 3.0, 4.0], n_bins=2)
    bin0 = 2 * abs(0.5 - sigmoid(1.0))
    bin1 = 2 * abs(1.0 - sigmoid(3.5))
    assert ece == pytest.approx((bin0 + bin1) / 4)


def test_all_ties_fall_in_one_bin_and_count_as_right() -> None:
    assert expected_calibration_error([0.0, 0.0, 0.0]) == pytest.approx(0.5)  # |1 - sigmoid(0)|


def test_confident_and_right_is_well_calibrated() -> None:
    assert expected_calibration_error([50.0] * 10) == pytest.approx(0.0, abs=1e-12)


def test_bins_must_be_positive() -> None:
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error([1.0], n_bins=0)
