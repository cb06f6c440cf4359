import pytest

from obliviate.attacks.trust import metric_keys, metric_trust, separation_auc, trust_markdown


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
    assert f["separates"] is False and f["moves_quantize"] == pytest.approx(0.01) and f["trusted"] is False
    mia = r["mia_auc_min_k"]
    assert mia["auc"] == 1.0 and mia["separates"] and mia["moves_quantize"] == pytest.approx(0.3)
    assert mia["stable"] is False and mia["trusted"] is False  # separates, but quantization moves it
    rel = r["relearn_disjoint"]
    assert rel["kind"] == "attack" and rel["key"] == "relearn_disjoint_acc" and rel["auc"] == 1.0
    assert rel["lift"] == pytest.approx(((0.02 - 0.0) + (0.0 - 0.05) + (0.05 - 0.1)) / 3)
    assert rel["stable"] and rel["trusted"]
    assert rel["with"] == pytest.approx(0.9) and rel["without"] == pytest.approx(0.07 / 3)
    md = "\n".join(trust_markdown(t))
    assert "## Which numbers to trust on this task" in md and "Trusted here: `forget_qa_em`" not in md
    assert "| relearn_disjoint | attack | 1.00 | yes |" in md and "| yes | yes | yes |" in md


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
