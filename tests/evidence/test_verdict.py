"""The verdict rule of obliviate.evidence.verdict, on hand-built result dicts."""

import pytest

from obliviate.attacks.relearn_disjoint import LEAKAGE_FLAG
from obliviate.evidence.verdict import (
    BAND_ALPHA,
    KEEP_SHARE,
    MAX_NEGATIVE_GAIN,
    SEPARATION,
    band_tolerance,
    calibration,
    forgot,
    gaps,
    method_verdict,
    recovery,
    robustness_markdown,
    robustness_summary,
    robustness_table,
    verdict_line,
)

K = "relearn_disjoint"
KEEP = {"retain_score": 0.9, "neighbour_score": 0.8}
"""The base model's keep scores; a model with the same keeps all of them."""


def _m(start, after, **extra):
    return {f"{K}_start_acc": start, f"{K}_acc": after, **extra}


def test_recovery_is_the_share_of_the_lost_score_brought_back():
    assert recovery(0.0, 0.5, 1.0) == 0.5
    assert recovery(0.2, 0.6, 1.0) == pytest.approx(0.5)
    assert recovery(1.0, 1.0, 1.0) is None and recovery(None, 0.5, 1.0) is None


def test_forgot_is_a_share_of_the_base_score_above_chance():
    assert forgot(0.5, 1.0) and not forgot(0.51, 1.0) and forgot(None, 1.0) is None
    # a 4-way MCQ forget set: base 0.45, a model at chance (0.25) has forgotten all of it
    assert forgot(0.25, 0.45, chance=0.25) and not forgot(0.25, 0.45)
    assert not forgot(0.36, 0.45, chance=0.25) and forgot(0.35, 0.45, chance=0.25)


def test_the_band_is_a_one_sided_two_proportion_test_against_the_oracle():
    # 72 items, the oracle at 1/72, 7 tests at BAND_ALPHA 0.10: z = 2.19; 7/72 passes, 8/72 does not, by hand
    n, p = 72, 1 / 72
    upper = p + band_tolerance(p, n, k=7)
    assert 7 / 72 <= upper < 8 / 72
    r = (p + upper) / 2
    from statistics import NormalDist
    z = NormalDist().inv_cdf(1 - BAND_ALPHA / 7)
    assert upper - p == pytest.approx(z * (2 * r * (1 - r) / n) ** 0.5, abs=1e-9)  # on the test's boundary
    assert band_tolerance(p, n, k=7) > band_tolerance(p, n)  # more attacks compared: a wider band each
    assert band_tolerance(0.3, 20) > band_tolerance(0.3, 200)  # fewer items: wider
    assert band_tolerance(0.0, 72) == pytest.approx(0.0, abs=0.1) and band_tolerance(0.0, 72) >= 1 / 72
    assert band_tolerance(0.0, 10_000) >= 1e-4  # at least one item


def test_calibration_needs_both_controls_to_behave():
    pos, neg = _m(0.0, 0.9), _m(0.05, 0.1)
    c = calibration(pos, neg, 1.0, K)
    assert c[f"{K}_calibrated"] and c[f"{K}_positive_recovery"] == pytest.approx(0.9)
    assert c[f"{K}_negative_gain"] == pytest.approx(0.05)
    assert not calibration(_m(0.0, 0.3), neg, 1.0, K)[f"{K}_calibrated"]
    assert not calibration(pos, _m(0.05, 0.3), 1.0, K)[f"{K}_calibrated"]
    assert not calibration(_m(0.0, 0.9), _m(0.0, 0.1 + MAX_NEGATIVE_GAIN + 0.05), 1.0, K)[f"{K}_calibrated"]
    assert not calibration(_m(0.0, 0.28), _m(0.0, 0.1), 0.5, K)[f"{K}_calibrated"]  # 0.18 < SEPARATION above
    assert SEPARATION == 0.2


def _world(n_items=72, **models):
    """Base, oracle, both positive controls (selective) and ``models``, on relearning, quantization and the
    logit lens (hand numbers): the refusal control comes back under relearning and the lens, not under rounding;
    the small-norm control also under rounding (which it was built to match)."""
    base = {"forget_score": 1.0, "forget_chance": 0.0, f"{K}_base_acc": 1.0, **KEEP, **_m(1.0, 1.0),
            "quantize_forget_score": 1.0, "logit_lens_top1": 1.0, "logit_lens_last_top1": 1.0}
    oracle = {"forget_score": 0.01, **KEEP, **_m(0.01, 0.03), "quantize_forget_score": 0.01,
              "logit_lens_top1": 0.02, "logit_lens_last_top1": 0.3}
    refusal = {"forget_score": 0.0, **KEEP, **_m(0.0, 0.95), "quantize_forget_score": 0.02,
               "logit_lens_top1": 0.9, "logit_lens_last_top1": 0.9}
    small = {"forget_score": 0.0, **KEEP, **_m(0.0, 0.9), "quantize_forget_score": 0.95,
             "logit_lens_top1": 0.2, "logit_lens_last_top1": 0.6}
    metrics = {"base": base, "oracle": oracle, "positive_control": refusal, "positive_control_smallnorm": small,
               **models}
    return metrics, robustness_summary(metrics, items=n_items)


def _like_oracle(**over):
    return {"forget_score": 0.0, **KEEP, **_m(0.0, 0.04), "quantize_forget_score": 0.0, "logit_lens_top1": 0.03,
            "logit_lens_last_top1": 0.3, **over}


def test_a_model_like_the_oracle_is_removed():
    _, r = _world(m=_like_oracle())
    v = r["verdicts"]["m"]
    assert v["verdict"] == "removed" and v["keep"] == {"retain": 1.0, "neighbour": 1.0}


def test_the_wrecked_model_is_not_removed():
    """Retain and neighbour at 0, every attack at 0: it lost what it should keep (issue #41)."""
    wrecked = _like_oracle(retain_score=0.0, neighbour_score=0.0, **_m(0.0, 0.0), logit_lens_top1=0.0)
    _, r = _world(m=wrecked)
    assert r["verdicts"]["m"]["verdict"] == "retain lost"
    half = _like_oracle(neighbour_score=0.8 * 0.6)  # neighbour alone lost
    _, r = _world(m=half)
    assert r["verdicts"]["m"]["verdict"] == "retain lost" and "neighbour" in r["verdicts"]["m"]["reason"]


def test_a_keep_share_just_under_the_bar_is_lost_only_beyond_noise():
    """Neighbour at 0.704 of the base model's 0.8 (a share of 0.88): over 72 items a model that keeps 90% reads that
    low by sampling (retain lost was a truly removed model's verdict 1-4% of the time); over 5000 it does not (the
    allowance is then 0.0185 of the share)."""
    just = _like_oracle(neighbour_score=0.8 * 0.88)
    assert 0.88 < KEEP_SHARE
    _, r = _world(m=just)
    assert r["verdicts"]["m"]["verdict"] == "removed"
    metrics, _ = _world(m=just)
    metrics["base"]["neighbour_items"] = 5000
    v = robustness_summary(metrics, items=72)["verdicts"]["m"]
    assert v["verdict"] == "retain lost" and "neighbour" in v["reason"]


def test_a_model_at_045_under_every_attack_is_not_removed_when_the_oracle_sits_at_001():
    """Recovery is read against the oracle's level, never against the model's own start (issue #41)."""
    flat = _like_oracle(forget_score=0.45, **_m(0.45, 0.45), quantize_forget_score=0.45, logit_lens_top1=0.45)
    _, r = _world(m=flat)
    v = r["verdicts"]["m"]
    assert v["verdict"] != "removed" and v["verdict"] == "inconclusive" and "oracle band" in v["reason"]


def test_an_oracle_with_a_high_prior():
    """The oracle guesses 30% before any attack and 32% after: a model there is removed, one well above is not. On
    400 items: at 72 the band over a 0.32 oracle is too wide to detect a held share of 0.2 (too few items)."""
    metrics, _ = _world()
    metrics["oracle"].update({"forget_score": 0.30, **_m(0.30, 0.32), "quantize_forget_score": 0.30,
                              "logit_lens_top1": 0.31})
    metrics["base"]["forget_score"] = 0.9
    metrics["prior"] = _like_oracle(forget_score=0.29, **_m(0.29, 0.33), quantize_forget_score=0.3,
                                    logit_lens_top1=0.3)
    metrics["above"] = _like_oracle(forget_score=0.29, **_m(0.29, 0.62), quantize_forget_score=0.3,
                                    logit_lens_top1=0.3)
    r = robustness_summary(metrics, items=400)
    assert r["calibration"][K]["calibrated"]
    assert r["verdicts"]["prior"]["verdict"] == "removed"
    assert r["verdicts"]["above"]["verdict"] in ("suppressed", "inconclusive")
    assert r["verdicts"]["above"]["verdict"] != "removed"


def test_a_task_without_groups_where_quantize_alone_would_decide():
    """No disjoint relearning; quantization is calibrated only by the control built to match it, and corpus
    relearning (uncalibrated) brings 33% back: not removed (issue #41)."""
    metrics, _ = _world()
    for name in ("base", "oracle", "positive_control", "positive_control_smallnorm"):
        for k in (f"{K}_start_acc", f"{K}_acc", f"{K}_base_acc", "logit_lens_top1", "logit_lens_last_top1"):
            metrics[name].pop(k, None)
        metrics[name].update({"relearn_start_acc": metrics[name]["forget_score"], "relearn_acc": 0.05})
    metrics["base"].update(relearn_start_acc=1.0, relearn_acc=1.0, relearn_base_acc=1.0)
    metrics["graddiff"] = {"forget_score": 0.0, **KEEP, "quantize_forget_score": 0.0, "relearn_start_acc": 0.0,
                           "relearn_acc": 0.33}
    r = robustness_summary(metrics, items=72)
    q = r["calibration"]["quantize"]
    assert not q["calibrated"] and q["by_construction"] == ["positive_control_smallnorm"]
    assert r["verdicts"]["graddiff"]["verdict"] != "removed"
    # with the lift under corpus relearning gone and nothing calibrated, still no *removed*: nothing proves it
    metrics["graddiff"]["relearn_acc"] = 0.05
    assert robustness_summary(metrics, items=72)["verdicts"]["graddiff"]["verdict"] == "inconclusive"


def test_a_frame_forced_lens_start_above_half_of_base_with_forget_score_0_is_not_not_unlearned():
    """The logit lens's before is the forget score; its frame-forced read is shown, never decides."""
    m = _like_oracle(logit_lens_last_top1=0.62)
    metrics, r = _world(m=m)
    assert r["verdicts"]["m"]["verdict"] == "removed"
    rows, _ = robustness_table(metrics, r)
    row = next(x for x in rows if x["model"] == "m")
    assert row["logit_lens"].startswith("0.00 → 0.03") and "frame-forced read 0.62" in row["logit_lens"]


def test_suppressed_against_selective_controls_only():
    sup = _like_oracle(**_m(0.0, 0.8))
    metrics, r = _world(m=sup)
    v = r["verdicts"]["m"]
    assert (v["verdict"], v["attack"], v["control"]) == ("suppressed", K, "positive_control")
    # both controls non-selective: no attack is calibrated, nothing can be suppressed or removed
    for c in ("positive_control", "positive_control_smallnorm"):
        metrics[c]["neighbour_score"] = 0.05
    r = robustness_summary(metrics, items=72)
    assert not r["controls"]["positive_control"]["selective"]
    assert r["calibration"][K]["non_selective"] == ["positive_control", "positive_control_smallnorm"]
    assert r["verdicts"]["m"]["verdict"] == "inconclusive"
    md = "\n".join(robustness_markdown(metrics, r))
    assert "**non-selective**" in md


def test_not_unlearned_reads_only_the_forget_score():
    kept = _like_oracle(forget_score=0.7)
    _, r = _world(m=kept)
    assert r["verdicts"]["m"]["verdict"] == "not unlearned"
    # an attack's own start above half the base does not make it not unlearned
    _, r = _world(m=_like_oracle(**_m(0.8, 0.8)))
    assert r["verdicts"]["m"]["verdict"] != "not unlearned"


def test_membership_inference_can_veto_removed():
    metrics, _ = _world(m=_like_oracle(mia_auc_min_k=0.81))
    metrics["base"]["mia_auc_min_k"] = 1.0
    metrics["oracle"]["mia_auc_min_k"] = 0.5
    r = robustness_summary(metrics, items=72)
    assert r["verdicts"]["m"]["verdict"] == "inconclusive" and r["verdicts"]["m"]["attack"] == "mia"
    metrics["oracle"]["mia_auc_min_k"] = 0.9  # MIA does not read the forget set: no veto
    assert robustness_summary(metrics, items=72)["verdicts"]["m"]["verdict"] == "removed"


def test_the_known_removed_models_are_judged_and_the_table_puts_them_first():
    metrics, r = _world(npo=_like_oracle(**_m(0.0, 0.8)), second_oracle=_like_oracle(), filtered=_like_oracle())
    assert list(r["verdicts"]) == ["second_oracle", "filtered", "npo"]
    assert r["verdicts"]["second_oracle"]["verdict"] == "removed"
    rows, cols = robustness_table(metrics, r)
    assert [row["model"] for row in rows][:7] == ["oracle", "positive_control", "positive_control_smallnorm", "base",
                                                  "second_oracle", "filtered", "npo"]
    assert [row["model"] for row in rows[-4:]] == ["calibrated?", "oracle band (≤)", "items (variants)",
                                                   "detects a held share of (at 80% power)"]
    assert rows[-2][K] == "72" and float(rows[-1][K]) <= 0.2
    md = "\n".join(robustness_markdown(metrics, r))
    assert "- npo: suppressed (relearn_disjoint, calibrated on positive_control)" in md


def test_gaps_read_beyond_the_models_own_answers():
    m = {"forget_score": 0.1, "format_shift_acc": 0.4, "probe_acc": 0.9, "forget_mcq_acc": 0.3}
    g = gaps(m)
    assert g["format_shift_gap"] == pytest.approx(0.3) and g["probe_gap"] == pytest.approx(0.6)
    assert gaps({"forget_score": 0.1}) == {}


def test_priv_leak_against_the_oracle():
    metrics, _ = _world(m=_like_oracle(mia_auc_loss=0.8))
    metrics["oracle"]["mia_auc_loss"] = 0.5
    robustness_summary(metrics, items=72)
    # MUSE's AUC is 1 - ours (holdout labelled 1): ((1 - 0.8) - (1 - 0.5)) / (1 - 0.5)
    assert metrics["m"]["priv_leak_loss"] == pytest.approx(-0.6)


def test_method_verdict_without_usable_attacks_is_inconclusive():
    base = {"forget_score": 1.0, **KEEP}
    assert method_verdict(_like_oracle(), base, {}, None, [])["verdict"] == "inconclusive"


def test_a_known_removed_model_not_called_removed_is_said_in_the_report():
    metrics, r = _world(second_oracle=_like_oracle(**_m(0.0, 0.6)), filtered=_like_oracle(neighbour_score=0.1))
    md = "\n".join(robustness_markdown(metrics, r))
    assert "The second oracle is *suppressed*, not removed." in md and "defect of the rule" in md
    assert "The filtered model is *retain lost*, not removed" in md


def test_the_verdict_line_names_a_flag_on_the_deciding_attack():
    """A suppressed verdict decided by the disjoint attack on leaking folds says so in its line (issue #56, item 12);
    the same model with folds that do not leak has no flag, and a flag on an attack that did not decide is not
    named."""
    for leak, flagged in ((0.45, True), (LEAKAGE_FLAG - 0.01, False), (None, False)):
        _, r = _world(m=_like_oracle(**_m(0.0, 0.8), relearn_disjoint_leakage=leak))
        v = r["verdicts"]["m"]
        assert v["verdict"] == "suppressed" and v["attack"] == K
        line = verdict_line("verdict", v)
        assert ("flagged: high leakage: 45%" in line) is flagged and ("flag" in v) is flagged
    _, r = _world(m=_like_oracle(forget_score=0.7, relearn_disjoint_leakage=0.45))  # not unlearned: no attack decided
    assert "flag" not in r["verdicts"]["m"] and "flagged" not in verdict_line("m", r["verdicts"]["m"])
    _, r = _world(m=_like_oracle(relearn_disjoint_leakage=0.45))  # removed: every read in the band, inflated or not
    assert r["verdicts"]["m"]["verdict"] == "removed" and "flag" not in r["verdicts"]["m"]


# The audit of issue #57, one test per kind: each fails when its fix is removed.

def test_a_model_inside_the_band_is_never_suppressed():
    """The control hid imperfectly (start 0.1) and the model starts at 0: half the control's recovery from the
    model's own start lands inside the band, which the calibration guard (at the control's start) did not see."""
    base = {"forget_score": 1.0, "forget_chance": 0.0, **KEEP, **_m(0.3, 0.3), f"{K}_base_acc": 0.3}
    metrics = {"base": base, "oracle": {"forget_score": 0.01, **KEEP, **_m(0.06, 0.06)},
               "positive_control": {"forget_score": 0.0, **KEEP, **_m(0.1, 0.3)},
               "m": {"forget_score": 0.0, **KEEP, **_m(0.0, 0.15)}}
    r = robustness_summary(metrics, items=30)
    assert r["calibration"][K]["calibrated"]
    upper = r["band"][K]["upper"]
    rec_m, rec_c = 0.15 / 0.3, (0.3 - 0.1) / (0.3 - 0.1)
    assert rec_m >= 0.5 * rec_c and 0.15 <= upper  # the old rule's suppressed, inside the one band
    assert r["verdicts"]["m"]["verdict"] != "suppressed"
    metrics["m"][f"{K}_acc"] = upper + 0.02  # above the band: suppressed
    assert robustness_summary(metrics, items=30)["verdicts"]["m"]["verdict"] == "suppressed"


def test_the_calibration_guard_uses_the_bands_tolerance():
    """The guard of the calibration reads the same band as the verdicts (Bonferroni over every test of the band),
    not a one-attack band: with more reads compared the same controls can stop calibrating."""
    metrics, r = _world()
    tol = r["band"][K]["tolerance"]
    assert tol == pytest.approx(band_tolerance(r["band"][K]["oracle"], 72, r["band"][K]["tests"]))
    assert r["band"][K]["tests"] == 3 and tol > band_tolerance(r["band"][K]["oracle"], 72)


@pytest.mark.parametrize("key", ["forget_score", f"{K}_acc", f"{K}_start_acc", "retain_score", "neighbour_score",
                                 "quantize_forget_score"])
@pytest.mark.parametrize("bad", [float("nan"), None, float("inf")])
def test_a_missing_or_non_finite_read_is_inconclusive_never_removed(key, bad):
    m = _like_oracle()
    if bad is None:
        m.pop(key)
    else:
        m[key] = bad
    _, r = _world(m=m)
    v = r["verdicts"]["m"]
    assert v["verdict"] == "inconclusive", v
    named = {"forget_score": "forget score", "retain_score": "retain score", "neighbour_score": "neighbour score",
             "quantize_forget_score": "quantize (after)", f"{K}_acc": f"{K} (after)", f"{K}_start_acc": f"{K} (before)"}
    assert named[key] in v["reason"]


def test_a_missing_mia_where_it_reads_the_oracle_is_inconclusive():
    metrics, _ = _world(m=_like_oracle())
    metrics["base"]["mia_auc_min_k"], metrics["oracle"]["mia_auc_min_k"] = 1.0, 0.5
    v = robustness_summary(metrics, items=72)["verdicts"]["m"]
    assert v["verdict"] == "inconclusive" and "MIA" in v["reason"]
    metrics["m"]["mia_auc_min_k"] = float("nan")
    assert robustness_summary(metrics, items=72)["verdicts"]["m"]["verdict"] == "inconclusive"
    metrics["m"]["mia_auc_min_k"] = 0.52
    assert robustness_summary(metrics, items=72)["verdicts"]["m"]["verdict"] == "removed"


def test_a_base_without_a_forget_score_gives_no_verdict_but_inconclusive():
    metrics, _ = _world(m=_like_oracle())
    metrics["base"]["forget_score"] = float("nan")
    v = robustness_summary(metrics, items=72)["verdicts"]["m"]
    assert v["verdict"] == "inconclusive" and "base model" in v["reason"]


def test_a_copy_of_the_oracle_on_a_hard_task_is_not_not_unlearned():
    """The oracle answers 30% of the forget questions (a hard task, or one known from elsewhere), the base 50%: a
    copy of the oracle has forgotten all it could; a copy of the base has not."""
    metrics, _ = _world()
    metrics["base"]["forget_score"] = 0.5
    metrics["oracle"]["forget_score"] = 0.3
    metrics["copy"] = {**metrics["oracle"]}
    metrics["kept"] = {**metrics["oracle"], "forget_score": 0.5}
    r = robustness_summary(metrics, items=72)
    assert r["verdicts"]["copy"]["verdict"] != "not unlearned"
    kept = r["verdicts"]["kept"]
    assert kept["verdict"] == "not unlearned" and "the oracle's level" in kept["reason"]


def test_below_chance_beyond_the_band_is_not_removed():
    """A 4-way lettered task: the oracle at chance (0.25); a model at 0.02 avoids the right answer, which takes
    knowing it."""
    metrics, _ = _world()
    for name in metrics:
        metrics[name]["forget_chance"] = 0.25
    metrics["base"]["forget_score"] = 0.95
    metrics["oracle"].update(forget_score=0.25, quantize_forget_score=0.25)
    metrics["avoids"] = _like_oracle(forget_score=0.02, quantize_forget_score=0.02)
    metrics["at_chance"] = _like_oracle(forget_score=0.25, quantize_forget_score=0.26)
    r = robustness_summary(metrics, items=200)
    assert r["band"]["quantize"]["lower"] is not None and r["band"]["quantize"]["lower"] > 0.02
    v = r["verdicts"]["avoids"]
    assert v["verdict"] == "inconclusive" and "below chance" in v["reason"]
    metrics["avoids"]["quantize_forget_score"] = 0.25  # the forget score alone below chance: still not removed
    v = robustness_summary(metrics, items=200)["verdicts"]["avoids"]
    assert v["verdict"] == "inconclusive" and "below chance" in v["reason"]
    assert r["verdicts"]["at_chance"]["verdict"] == "removed"


def test_too_few_items_to_detect_a_held_share_is_inconclusive():
    """24 items: a model like the oracle cannot be told from one holding 20% with 80% power; 200 can."""
    _, r = _world(n_items=24, m=_like_oracle())
    v = r["verdicts"]["m"]
    assert v["verdict"] == "inconclusive" and "too few items (n=24, at least" in v["reason"]
    need = max(b["items_needed"] for b in r["band"].values())
    assert need > 24 and r["band"][K]["detectable_share"] > 0.2
    _, r = _world(n_items=need, m=_like_oracle())
    assert r["verdicts"]["m"]["verdict"] == "removed"
    assert all(b["detectable_share"] <= 0.2 for b in r["band"].values())


def test_each_read_uses_its_own_item_count_and_a_maximum_its_variants():
    metrics, r = _world(m=_like_oracle())
    metrics["oracle"].update(quantize_items=32, quantize_variants=3)
    r2 = robustness_summary(metrics, items=72)
    q, k = r2["band"]["quantize"], r2["band"][K]
    assert (q["items"], q["variants"], k["items"], k["variants"]) == (32, 3, 72, 1)
    assert q["tests"] == k["tests"] == 5  # 3 variants of quantize + relearn_disjoint + logit_lens, one side each
    assert q["tolerance"] == pytest.approx(band_tolerance(q["oracle"], 32, 5))
    assert q["tolerance"] > r["band"]["quantize"]["tolerance"]


def test_power_is_the_normal_tail_and_falls_smoothly_with_fewer_items():
    from statistics import NormalDist

    from obliviate.evidence.verdict import detectable_share, power

    assert power(0.3, 100, 0.2) == pytest.approx(1 - NormalDist().cdf((0.2 - 0.3) / (0.3 * 0.7 / 100) ** 0.5))
    shares = [detectable_share(0.02, 1.0, n, 0.02 + band_tolerance(0.02, n, 7)) for n in range(20, 200)]
    assert all(a >= b - 1e-9 for a, b in zip(shares, shares[1:]))  # more items never detect less


def test_a_flag_is_not_named_where_the_read_lifted_nothing():
    """Too few items is no lift: the disjoint attack's leakage flag doubts a recovery, and there is none."""
    _, r = _world(n_items=24, m=_like_oracle(relearn_disjoint_leakage=0.45))
    v = r["verdicts"]["m"]
    assert v["verdict"] == "inconclusive" and "too few items" in v["reason"] and "flag" not in v
    _, r = _world(m=_like_oracle(**_m(0.0, 0.8), relearn_disjoint_leakage=0.45))
    assert "flag" in r["verdicts"]["m"] and r["verdicts"]["m"]["lifted"]

