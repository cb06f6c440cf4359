"""UQ, FQ and RD by hand (docs/methods.md)."""

import pytest

from obliviate.errors import ObliviateError
from obliviate.eval.uq import forget_drop, retain_degradation, unlearning_quality


def test_uq_hand_computed():
    # FQ = (0.8 - 0.2) / 0.8 = 0.75; RD = (0.9 - 0.81) / 0.9 = 0.1; HM(0.75, 0.9) = 1.35 / 1.65
    out = unlearning_quality(0.8, 0.2, 0.9, 0.81)
    assert out["fq"] == pytest.approx(0.75)
    assert out["rd"] == pytest.approx(0.1)
    assert out["uq"] == pytest.approx(100 * 1.35 / 1.65)  # 81.818...
    assert out["uq"] == pytest.approx(81.8182, abs=1e-4)


def test_clipping_and_zero_cases():
    assert retain_degradation(0.5, 0.6) == 0.0  # retain improved: no degradation
    assert forget_drop(0.5, 0.7) == 0.0  # forget score went up: no forgetting
    assert unlearning_quality(0.5, 0.7, 0.5, 0.5)["uq"] == 0.0  # HM with a zero is zero
    assert unlearning_quality(0.5, 0.0, 0.5, 0.0)["uq"] == 0.0  # retain wiped out: 1 - RD = 0
    assert unlearning_quality(0.5, 0.0, 0.5, 0.5)["uq"] == pytest.approx(100.0)
    assert retain_degradation(0.5, -1.0) == 1.0


def test_zero_base_scores_are_errors():
    with pytest.raises(ObliviateError, match="F0"):
        forget_drop(0.0, 0.0)
    with pytest.raises(ObliviateError, match="R0"):
        retain_degradation(0.0, 0.1)
