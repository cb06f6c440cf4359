"""Calibration arithmetic of obliviate.attacks.controls, by hand."""

import pytest

from obliviate.attacks.controls import (
    MAX_NEGATIVE_GAIN,
    SEPARATION,
    calibration,
    forgot,
    gaps,
    method_verdict,
    recovery,
    robustness_markdown,
    robustness_summary,
    robustness_table,
    verdict,
)


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
    assert r["verdicts"]["npo"] == {"verdict": "suppressed", "attack": "relearn_disjoint",
                                    "control": "positive_control",
                                    "reason": "relearn_disjoint: 0.00 -> 0.90 (calibrated on positive_control)"}
    # MUSE's AUC is 1 - ours (holdout labelled 1): ((1 - 0.8) - (1 - 0.5)) / (1 - 0.5)
    assert meth["priv_leak_loss"] == pytest.approx(-0.6)


K = "relearn_disjoint"


def _m(start, after):
    return {f"{K}_start_acc": start, f"{K}_acc": after}


# (case, base, positive control start -> after, negative control start -> after, method start -> after,
#  calibrated, verdict). The first three rows are issue #28's counterexamples, run through the old rule.
CASES = [
    ("low base: the positive control ends barely above the oracle", 0.15, (0, 0.08), (0, 0.05), (0, 0.15), False,
     "inconclusive"),
    ("recovers 40% where the positive control recovers 60%", 0.5, (0, 0.3), (0, 0.1), (0, 0.2), True, "suppressed"),
    ("never forgot, and the attack pushes it down", 0.9, (0, 0.85), (0, 0.05), (0.85, 0.05), True, "not unlearned"),
    ("as the oracle", 1.0, (0, 0.9), (0, 0.1), (0, 0.12), True, "removed"),
    ("at the removed boundary (oracle + 0.05)", 1.0, (0, 0.9), (0, 0.1), (0, 0.15), True, "removed"),
    ("just above the removed boundary", 1.0, (0, 0.9), (0, 0.1), (0, 0.16), True, "inconclusive"),
    ("at the suppressed boundary (half the positive control)", 1.0, (0, 0.9), (0, 0.1), (0, 0.45), True, "suppressed"),
    ("just below the suppressed boundary", 1.0, (0, 0.9), (0, 0.1), (0, 0.44), True, "inconclusive"),
    ("more than the positive control", 1.0, (0, 0.9), (0, 0.1), (0, 1.0), True, "suppressed"),
    ("forgot exactly half of the base score", 1.0, (0, 0.9), (0, 0.1), (0.5, 0.5), True, "removed"),
    ("the positive control had not forgotten", 1.0, (0.8, 0.95), (0, 0.1), (0, 0.9), False, "inconclusive"),
    ("the oracle gains too much", 1.0, (0, 0.9), (0, 0.1 + MAX_NEGATIVE_GAIN + 0.05), (0, 0.9), False,
     "inconclusive"),
    ("the positive control gets back less than half", 1.0, (0, 0.45), (0, 0.1), (0, 0.2), False, "inconclusive"),
    ("uncalibrated, but it never forgot", 1.0, (0, 0.05), (0, 0.0), (0.9, 0.9), False, "not unlearned"),
]


@pytest.mark.parametrize("case, base, pos, neg, meth, calibrated, expected", CASES, ids=[c[0] for c in CASES])
def test_the_verdict_rule(case, base, pos, neg, meth, calibrated, expected):
    c = calibration(_m(*pos), _m(*neg), base, K)
    assert c[f"{K}_calibrated"] is calibrated
    assert verdict(_m(*meth), _m(*pos), _m(*neg), base, K, c[f"{K}_calibrated"]) == expected


def test_removed_and_suppressed_exclude_each_other_on_every_calibrated_attack():
    """Over a grid of controls and methods, a calibrated attack never leaves a method in both bands."""
    grid = [i / 20 for i in range(21)]
    for p1 in grid:
        for n1 in grid[:6]:
            c = calibration(_m(0.0, p1), _m(0.0, n1), 1.0, K)
            if not c[f"{K}_calibrated"]:
                continue
            assert p1 >= n1 + SEPARATION - 1e-12
            for after in grid:
                rec = recovery(0.0, after, 1.0)
                in_removed = rec <= c[f"{K}_negative_recovery"] + 0.05
                in_suppressed = rec >= 0.5 * c[f"{K}_positive_recovery"]
                assert not (in_removed and in_suppressed)


def test_the_worst_calibrated_attack_decides_and_membership_inference_can_veto_removed():
    base = {"forget_score": 1.0, "relearn_disjoint_base_acc": 1.0, "relearn_base_acc": 1.0, "mia_auc_min_k": 1.0}
    pos = {**_m(0.0, 0.95), "relearn_start_acc": 0.0, "relearn_acc": 0.9}
    neg = {**_m(0.0, 0.05), "relearn_start_acc": 0.0, "relearn_acc": 0.05, "mia_auc_min_k": 0.5}
    meth = {"forget_score": 0.0, **_m(0.0, 0.05), "relearn_start_acc": 0.0, "relearn_acc": 0.8, "mia_auc_min_k": 0.55}
    v = method_verdict(meth, base, pos, neg, ["relearn_disjoint", "relearn"])
    assert v["verdict"] == "suppressed" and v["attack"] == "relearn"  # removed under one, suppressed under the other
    quiet = {**meth, "relearn_acc": 0.05}
    assert method_verdict(quiet, base, pos, neg, ["relearn_disjoint", "relearn"])["verdict"] == "removed"
    leaky = {**quiet, "mia_auc_min_k": 0.81}  # issue #28: "removed" beside an MIA AUC of 0.81 (oracle 0.34)
    v = method_verdict(leaky, base, pos, neg, ["relearn_disjoint", "relearn"])
    assert v["verdict"] == "inconclusive" and v["attack"] == "mia"
    blind = {**neg, "mia_auc_min_k": 0.9}  # MIA does not read the forget set (base 1.0 vs oracle 0.9): no veto
    assert method_verdict(leaky, base, pos, blind, ["relearn_disjoint"])["verdict"] == "removed"
    kept = {**quiet, "forget_score": 0.7}
    assert method_verdict(kept, base, pos, neg, ["relearn_disjoint"])["verdict"] == "not unlearned"
    assert method_verdict(quiet, base, pos, neg, [])["verdict"] == "inconclusive"


def test_forgot_is_a_share_of_the_base_score_above_chance():
    assert forgot(0.5, 1.0) and not forgot(0.51, 1.0) and forgot(None, 1.0) is None
    # a 4-way MCQ forget set: base 0.45, a model at chance (0.25) has forgotten all of it (review finding)
    assert forgot(0.25, 0.45, chance=0.25) and not forgot(0.25, 0.45)
    assert not forgot(0.36, 0.45, chance=0.25) and forgot(0.35, 0.45, chance=0.25)


def _world(**extra):
    """Base, oracle, the two positive controls and one method, on relearning and quantization (hand numbers):
    the refusal control is undone by relearning, not by rounding; the small-norm control by rounding too."""
    base = {"forget_score": 1.0, "forget_chance": 0.0, "relearn_disjoint_base_acc": 1.0,
            "ablate_whitebox_forget_score": 1.0, "quantize_forget_score": 1.0}
    neg = {"forget_score": 0.0, **_m(0.0, 0.05), "quantize_forget_score": 0.02, "ablate_whitebox_forget_score": 0.0}
    refusal = {"forget_score": 0.0, **_m(0.0, 0.9), "quantize_forget_score": 0.05,
               "ablate_whitebox_forget_score": 0.9}
    small = {"forget_score": 0.05, **_m(0.05, 0.8), "quantize_forget_score": 0.85,
             "ablate_whitebox_forget_score": 0.1}
    return {"base": base, "oracle": neg, "positive_control": refusal, "positive_control_smallnorm": small, **extra}


def test_each_attack_is_calibrated_on_the_control_it_separates_and_quantization_can_decide():
    """Quantization brings the small-norm control back (0.05 -> 0.85) but not the refusal control (0.0 -> 0.05):
    calibrated on the first only; a method that relearning reads as removed but rounding brings back is
    suppressed, decided by quantize on the small-norm control."""
    ga = {"forget_score": 0.0, **_m(0.0, 0.06), "quantize_forget_score": 0.7, "ablate_whitebox_forget_score": 0.0}
    metrics = _world(ga=ga)
    r = robustness_summary(metrics)
    q, d = r["calibration"]["quantize"], r["calibration"]["relearn_disjoint"]
    assert q["calibrated"] and q["calibrated_by"] == ["positive_control_smallnorm"]
    assert not q["controls"]["positive_control"]["calibrated"]
    assert q["controls"]["positive_control_smallnorm"]["positive_recovery"] == pytest.approx(0.8 / 0.95)
    assert d["calibrated_by"] == ["positive_control", "positive_control_smallnorm"]
    v = r["verdicts"]["ga"]
    assert (v["verdict"], v["attack"], v["control"]) == ("suppressed", "quantize", "positive_control_smallnorm")
    assert v["reason"] == "quantize: 0.00 -> 0.70 (calibrated on positive_control_smallnorm)"
    # the white-box ablation is calibrated (the refusal control comes back) but never decides a verdict
    assert r["calibration"]["ablate_whitebox"]["calibrated"] and not r["calibration"]["ablate_whitebox"]["decides"]
    leaky = {**ga, "quantize_forget_score": 0.0, "ablate_whitebox_forget_score": 0.9}
    assert robustness_summary(_world(ga=leaky))["verdicts"]["ga"]["verdict"] == "removed"


def test_an_uncalibrated_attack_is_shown_but_kept_out_of_the_verdict():
    metrics = _world()
    for c in ("positive_control", "positive_control_smallnorm"):  # neither control comes back under rounding
        metrics[c]["quantize_forget_score"] = metrics[c]["forget_score"]
    metrics["ga"] = {"forget_score": 0.0, **_m(0.0, 0.06), "quantize_forget_score": 0.9}
    r = robustness_summary(metrics)
    assert not r["calibration"]["quantize"]["calibrated"] and r["calibration"]["quantize"]["calibrated_by"] == []
    assert r["verdicts"]["ga"]["verdict"] == "removed" and r["verdicts"]["ga"]["attack"] == "relearn_disjoint"
    rows, cols = robustness_table(metrics, r)
    assert cols[:3] == ["model", "verdict", "decided by"] and {"quantize", "relearn_disjoint"} <= set(cols)
    assert [row["model"] for row in rows] == ["oracle", "positive_control", "positive_control_smallnorm", "base", "ga",
                                              "calibrated?"]
    ga = rows[4]
    assert ga["quantize"] == "0.00 → 0.90" and ga["decided by"] == "relearn_disjoint (positive_control)"
    assert rows[-1]["quantize"] == "no" and rows[-1]["relearn_disjoint"].startswith("yes: positive_control")
    md = "\n".join(robustness_markdown(metrics, r))
    assert "`quantize` (the best quantized copy's forget score): **uncalibrated**" in md
    assert "| ga | removed | relearn_disjoint (positive_control) |" in md
