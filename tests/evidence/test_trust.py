import pytest

from obliviate.eval.core import harmonic_mean
from obliviate.evidence.trust import (MIN_POOL, metric_keys, metric_trust, move, robustness,
                                     separation_auc, trust_markdown)


def test_the_auc_is_the_share_of_pairs_in_order_ties_half():
    assert separation_auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert separation_auc([0.1], [0.9]) == 0.0
    assert separation_auc([0.5, 0.9], [0.5, 0.1]) == pytest.approx((0.5 + 1 + 1 + 1) / 4)
    assert separation_auc([], [0.1]) is None


def _metrics():
    """Greedy forget_score blind to suppression; the MIA AUC separating but moved by quantization; relearning
    separating and flat on the models without the knowledge."""
    with_ = {"base": (1.0, 0.9, 1.0), "positive_control": (0.05, 0.8, 0.9),
             "positive_control_smallnorm": (0.0, 0.85, 0.8)}
    without = {"oracle": (0.0, 0.5, 0.02), "second_oracle": (0.05, 0.52, 0.0), "filtered": (0.1, 0.45, 0.05)}
    m = {}
    for name, (f, mia, relearn) in {**with_, **without}.items():
        m[name] = {"forget_score": f, "forget_chance": 0.0, "mia_auc_min_k": mia, "mia_auc_min_k_control": 0.5,
                   "relearn_disjoint_start_acc": f, "relearn_disjoint_acc": relearn,
                   "quantize_int4_forget_score": f + 0.01, "quantize_int4_mia_auc_min_k": mia + 0.3,
                   "quantize_nf4_forget_score": f, "quantize_nf4_mia_auc_min_k": mia - 0.05,
                   "forget_qa_em": f, "retain_score": 1.0, "attacks_run": ["relearn_disjoint"]}
    m["npo"] = {"forget_score": 0.9}  # a method: in neither group
    return m


def test_each_read_gets_its_separation_and_stability():
    t = metric_trust(_metrics(), {"relearn_disjoint": {"calibrated": True}})
    assert t["groups"] == {"with": ["base", "positive_control", "positive_control_smallnorm"],
                           "without": ["oracle", "second_oracle", "filtered"]}
    r = t["reads"]
    assert "forget_chance" not in r and "mia_auc_min_k_control" not in r and "retain_score" not in r
    f = r["forget_score"]
    # 1.0 beats all three; 0.05 beats one and ties one; 0.0 ties one
    assert f["kind"] == "metric" and f["auc"] == pytest.approx((3 + 1.5 + 0.5) / 9)
    assert (f["n_with"], f["n_without"], f["too_few_models"]) == (3, 3, False)
    # quantization: int4 moves every model 0.01, nf4 none; relearning on its scale: relearn_disjoint's lifts
    # +0.02, -0.05, -0.05, the worst 0.05 (second_oracle, the first of the two)
    assert f["robust_quantize"] == pytest.approx(0.99) and f["robust_relearn"] == pytest.approx(0.95)
    assert f["worst_relearn"] == "second_oracle" and f["relearn_lifts"]["oracle"] == pytest.approx(0.02)
    assert f["robustness"] == pytest.approx(2 * 0.99 * 0.95 / (0.99 + 0.95))
    assert f["separates"] is False and f["stable"] and f["trusted"] is False
    mia = r["mia_auc_min_k"]
    assert mia["auc"] == 1.0 and mia["separates"] and mia["robust_quantize"] == pytest.approx(0.7)
    assert mia["robust_relearn"] is None and mia["robustness"] == pytest.approx(0.7)  # no relearning reads an MIA
    assert mia["stable"] is False and mia["trusted"] is False  # separates, but quantization moves it
    rel = r["relearn_disjoint"]
    assert rel["kind"] == "attack" and rel["key"] == "relearn_disjoint_acc" and rel["auc"] == 1.0
    assert rel["relearn_lifts"] == pytest.approx({"oracle": 0.02, "second_oracle": -0.05, "filtered": -0.05})
    assert rel["robust_quantize"] is None and rel["robustness"] == pytest.approx(0.95)
    assert rel["stable"] and rel["trusted"]
    assert rel["with"] == pytest.approx(0.9) and rel["without"] == pytest.approx(0.07 / 3)
    md = "\n".join(trust_markdown(t))
    assert "## Which numbers to trust on this task" in md and "Trusted here: `forget_qa_em`" not in md
    assert "| relearn_disjoint | attack | 1.00 (3 v 3) | yes |" in md and "| yes | yes | yes |" in md
    assert "| mia_auc_min_k | metric | 1.00 (3 v 3) | yes |" in md and "| 0.70 (oracle) |" in md


def test_a_read_missing_from_a_group_is_left_out():
    m = _metrics()
    for name in ("oracle", "second_oracle", "filtered"):
        del m[name]["mia_auc_min_k"]
    assert "mia_auc_min_k" not in metric_trust(m)["reads"]
    assert "mia_auc_min_k" in metric_keys(m)  # still a metric, just not readable here
    assert metric_trust({"base": {"forget_score": 1.0}})["reads"] == {}
    assert "no metric could be read" in "\n".join(trust_markdown(metric_trust({"base": {"forget_score": 1.0}})))


def test_an_uncalibrated_attack_is_never_trusted():
    """The report never calls an attack trusted that the verdict's calibration left uncalibrated (issue #56, item 12):
    relearn_disjoint separates and is stable, trusted only where it is calibrated."""
    calibrated = {"relearn_disjoint": {"calibrated": True}}
    for calibration, trusted in ((calibrated, True), ({"relearn_disjoint": {"calibrated": False}}, False),
                                 ({}, False), (None, False)):
        t = metric_trust(_metrics(), calibration)
        row = t["reads"]["relearn_disjoint"]
        assert row["separates"] and row["stable"] and row["trusted"] is trusted
        assert row["calibrated"] is trusted
        md = "\n".join(trust_markdown(t))
        assert ("`relearn_disjoint`" in md.split("Trusted here: ")[1].split("\n")[0]) is trusted
    assert "calibrated" not in metric_trust(_metrics(), calibrated)["reads"]["forget_score"]  # metrics: no such read


def _separating(models: dict[str, float]) -> dict:
    """Each model's forget score and relearn_disjoint read: 1.0 with the knowledge, 0.0 without, nothing moved."""
    return {n: {"forget_score": f, "relearn_disjoint_start_acc": f, "relearn_disjoint_acc": f,
                "quantize_int4_forget_score": f} for n, f in models.items()}


@pytest.mark.parametrize("names", [("base", "oracle"), ("base", "positive_control", "oracle", "second_oracle",
                                                          "filtered")])
def test_an_auc_needs_enough_models_a_side(names):
    """Base against the oracle alone (one pair) separates "perfectly" by the luck of one draw: with fewer than
    MIN_POOL models a side the AUC is not read, the row says too few models with its pool sizes, never trusted."""
    metrics = _separating({n: 1.0 if n in ("base", "positive_control") else 0.0 for n in names})
    n_with = sum(n in ("base", "positive_control") for n in names)
    t = metric_trust(metrics, {"relearn_disjoint": {"calibrated": True}})
    for name in ("forget_score", "relearn_disjoint"):
        row = t["reads"][name]
        assert row["too_few_models"] and row["auc"] is None and row["separates"] is None
        assert (row["n_with"], row["n_without"]) == (n_with, len(names) - n_with)
        assert row["stable"] and row["trusted"] is not True  # stable, calibrated, separating by eye: not enough
    md = "\n".join(trust_markdown(t))
    assert f"| too few models ({n_with} v {len(names) - n_with}) |" in md and "Trusted here: none." in md


def test_three_a_side_is_enough():
    metrics = _separating({"base": 1.0, "positive_control": 0.9, "positive_control_smallnorm": 0.8, "oracle": 0.0,
                           "second_oracle": 0.1, "filtered": 0.0})
    t = metric_trust(metrics, {"relearn_disjoint": {"calibrated": True}})
    row = t["reads"]["relearn_disjoint"]
    assert MIN_POOL == 3 and t["min_pool"] == MIN_POOL
    assert not row["too_few_models"] and row["auc"] == 1.0 and row["trusted"] is True
    assert "| relearn_disjoint | attack | 1.00 (3 v 3) | yes |" in "\n".join(trust_markdown(t))


def test_signed_lifts_do_not_cancel():
    """Relearning lifts one model without the knowledge by +0.3 and another by -0.3: a signed mean says 0 (the
    old rule called it stable); the worst model moved 0.3, so the read is not stable, under the attack itself and
    for the forget score the relearning attack reads."""
    m = _metrics()
    for name, (start, after) in {"oracle": (0.0, 0.3), "second_oracle": (0.3, 0.0), "filtered": (0.1, 0.1)}.items():
        m[name].update(relearn_disjoint_start_acc=start, relearn_disjoint_acc=after)
    r = metric_trust(m, {"relearn_disjoint": {"calibrated": True}})["reads"]
    rel = r["relearn_disjoint"]
    assert rel["relearn_lifts"] == pytest.approx({"oracle": 0.3, "second_oracle": -0.3, "filtered": 0.0})
    assert rel["robust_relearn"] == pytest.approx(0.7) and rel["worst_relearn"] == "oracle"
    assert rel["stable"] is False and rel["trusted"] is False
    f = r["forget_score"]
    assert f["robust_relearn"] == pytest.approx(0.7) and f["stable"] is False


def test_one_model_moving_under_quantization_cannot_hide():
    """Quantization moves one model without the knowledge by 0.25 and the others not at all: a mean over models
    says 0.083 (the old rule called it stable); the worst is 0.25, so the read is not stable."""
    m = _metrics()
    for name in ("oracle", "second_oracle", "filtered"):
        m[name].update(quantize_int4_mia_auc_min_k=m[name]["mia_auc_min_k"],
                       quantize_nf4_mia_auc_min_k=m[name]["mia_auc_min_k"])
    m["filtered"]["quantize_nf4_mia_auc_min_k"] = m["filtered"]["mia_auc_min_k"] - 0.25
    mia = metric_trust(m)["reads"]["mia_auc_min_k"]
    assert mia["quantize_moves"] == pytest.approx({"oracle": 0.0, "second_oracle": 0.0, "filtered": 0.25})
    assert mia["robust_quantize"] == pytest.approx(0.75) and mia["worst_quantize"] == "filtered"
    assert mia["stable"] is False and mia["trusted"] is False


def test_robustness_is_the_harmonic_mean_of_the_worst_cases():
    """By hand: HM(0.8, 0.6) = 2 * 0.8 * 0.6 / 1.4 = 0.6857 (the arithmetic mean would be 0.7); one alone is
    itself; a zero is zero. In a row: quantization's worst move 0.05 and relearning's 0.15 give HM(0.95, 0.85) =
    1.615 / 1.8 = 0.897, below 0.9: not stable (their arithmetic mean, 0.9, would have passed)."""
    assert harmonic_mean([0.8, 0.6]) == pytest.approx(0.96 / 1.4)
    assert robustness(0.8, 0.6) == pytest.approx(0.96 / 1.4) and robustness(None, 0.6) == 0.6
    assert robustness(0.8, None) == 0.8 and robustness(None, None) is None and robustness(0.0, 0.9) == 0.0
    m = _separating({"base": 1.0, "positive_control": 0.9, "positive_control_smallnorm": 0.8, "oracle": 0.0,
                     "second_oracle": 0.1, "filtered": 0.0})
    m["oracle"]["quantize_int4_forget_score"] = 0.05
    m["second_oracle"]["relearn_disjoint_acc"] = 0.25
    f = metric_trust(m)["reads"]["forget_score"]
    assert f["robust_quantize"] == pytest.approx(0.95) and f["worst_quantize"] == "oracle"
    assert f["robust_relearn"] == pytest.approx(0.85) and f["worst_relearn"] == "second_oracle"
    assert f["robustness"] == pytest.approx(1.615 / 1.8) and f["stable"] is False
    # quantization perfect, relearning 0.15: the harmonic mean 0.919 reaches 0.9, but one part moved 0.15
    m["oracle"]["quantize_int4_forget_score"] = 0.0
    f = metric_trust(m)["reads"]["forget_score"]
    assert f["robustness"] == pytest.approx(2 * 0.85 / 1.85) and f["robustness"] >= 0.9 and f["stable"] is False


def test_a_non_finite_read_is_no_read_and_a_non_finite_perturbation_the_worst():
    """NaN compares false with everything: counted, it would tie nothing and pass every bound. A NaN forget score
    is no read (the pool shrinks, here below MIN_POOL); a NaN after quantization or relearning broke the read on
    that model: stability 0 there."""
    m = _metrics()
    m["filtered"]["forget_score"] = float("nan")
    f = metric_trust(m)["reads"]["forget_score"]
    assert f["n_without"] == 2 and f["too_few_models"] and f["trusted"] is not True
    m = _metrics()
    m["oracle"]["quantize_nf4_forget_score"] = float("nan")
    m["second_oracle"]["relearn_disjoint_acc"] = float("inf")
    r = metric_trust(m, {"relearn_disjoint": {"calibrated": True}})["reads"]
    assert r["forget_score"]["robust_quantize"] == 0.0 and r["forget_score"]["worst_quantize"] == "oracle"
    assert r["relearn_disjoint"]["n_without"] == 2 and r["relearn_disjoint"]["robust_relearn"] == 0.0
    assert r["relearn_disjoint"]["trusted"] is False


def test_counts_are_no_metric_and_a_loss_moves_relatively():
    """``forget_items`` (the verdict's item count) and a text set's token count are no forget-side metric; a text
    set's loss is read, its quantization move relative (UDS's form): 3.0 -> 3.3 nats is 0.3 / 6.3, not 0.3."""
    m = _metrics()
    for name, row in m.items():
        row.update(forget_items=24, forget_text_tokens=900, forget_text_loss=3.0, quantize_int4_forget_text_loss=3.0)
    m["oracle"]["quantize_int4_forget_text_loss"] = 3.3
    keys = metric_keys(m)
    assert "forget_items" not in keys and "forget_text_tokens" not in keys and "forget_text_loss" in keys
    loss = metric_trust(m)["reads"]["forget_text_loss"]
    assert loss["quantize_moves"]["oracle"] == pytest.approx(0.3 / 6.3) and loss["worst_quantize"] == "oracle"
    assert move(0.1, 0.3) == pytest.approx(0.2) and move(0.3, float("nan")) == 1.0 and move(0.0, 0.0, "x_ppl") == 0.0
