"""Calibration arithmetic of obliviate.attacks.controls, by hand."""

import pytest

from obliviate.attacks.controls import calibration, gaps, recovery, robustness_summary, verdict


def test_recovery_is_the_share_of_the_lost_score_brought_back():
    assert recovery(0.0, 0.5, 1.0) == 0.5
    assert recovery(0.2, 0.6, 1.0) == pytest.approx(0.5)
    assert recovery(1.0, 1.0, 1.0) is None and recovery(None, 0.5, 1.0) is None


def test_calibration_needs_both_controls_to_behave():
    pos = {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.9}
    neg = {"relearn_disjoint_start_acc": 0.05, "relearn_disjoint_acc": 0.1}
    c = calibration(pos, neg, 1.0, "relearn_disjoint")
    assert c["relearn_disjoint_calibrated"] and c["relearn_disjoint_positive_recovery"] == pytest.approx(0.9)
    assert c["relearn_disjoint_negative_gain"] == pytest.approx(0.05)
    assert not calibration({**pos, "relearn_disjoint_acc": 0.3}, neg, 1.0, "relearn_disjoint")["relearn_disjoint_calibrated"]
    assert not calibration(pos, {**neg, "relearn_disjoint_acc": 0.3}, 1.0, "relearn_disjoint")["relearn_disjoint_calibrated"]


def test_verdicts():
    pos = {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.9}
    neg = {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.1}
    run = lambda after: verdict({"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": after}, pos, neg, 1.0,
                                "relearn_disjoint", True)
    assert run(0.15) == "removed" and run(0.8) == "suppressed" and run(0.3) == "inconclusive"
    assert verdict({"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.9}, pos, neg, 1.0,
                   "relearn_disjoint", False) == "inconclusive"


def test_gaps_read_beyond_the_models_own_answers():
    m = {"forget_score": 0.1, "format_shift_acc": 0.4, "probe_acc": 0.9, "forget_mcq_acc": 0.3}
    g = gaps(m)
    assert g["format_shift_gap"] == pytest.approx(0.3) and g["probe_gap"] == pytest.approx(0.6)
    assert gaps({"forget_score": 0.1}) == {}


def test_summary_uses_the_first_calibrated_attack_and_adds_priv_leak():
    base = {"relearn_disjoint_base_acc": 1.0, "relearn_base_acc": 1.0}
    pos = {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.95, "relearn_start_acc": 0.0, "relearn_acc": 0.0}
    neg = {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.05, "relearn_start_acc": 0.0,
           "relearn_acc": 0.0, "mia_auc_loss": 0.5}
    meth = {"relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.9, "relearn_start_acc": 0.0,
            "relearn_acc": 0.0, "mia_auc_loss": 0.8}
    r = robustness_summary({"base": base, "oracle": neg, "positive_control": pos, "npo": meth})
    assert r["calibration"]["relearn_disjoint"]["relearn_disjoint_calibrated"]
    assert not r["calibration"]["relearn"]["relearn_calibrated"]  # the positive control never came back
    assert r["verdicts"]["npo"] == {"verdict": "suppressed", "attack": "relearn_disjoint"}
    # MUSE's AUC is 1 - ours (holdout labelled 1): ((1 - 0.8) - (1 - 0.5)) / (1 - 0.5)
    assert meth["priv_leak_loss"] == pytest.approx(-0.6)
