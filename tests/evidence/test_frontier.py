"""The robustness frontier (evidence/frontier.py): each model's cost share, worst calibrated recovery and
neighbour keep, read from a comparison's results."""

import pytest

from obliviate.evidence.frontier import cost_share, frontier_points, plot_frontier, worst_recovery

BASE = {"forget_score": 0.9, "retain_score": 0.8, "neighbour_score": 0.5,
        "relearn_disjoint_start_acc": 0.9, "relearn_disjoint_acc": 0.9, "relearn_disjoint_base_acc": 0.8}
CALIBRATION = {"relearn_disjoint": {"calibrated": True, "decides": True},
               "logit_lens": {"calibrated": True, "decides": True},
               "ablate": {"calibrated": False, "decides": True},
               "ablate_whitebox": {"calibrated": True, "decides": False}}


def _model(start, after, lens, ablate=0.0, neighbour=0.5):
    return {"forget_score": start, "retain_score": 0.8, "neighbour_score": neighbour,
            "relearn_disjoint_start_acc": start, "relearn_disjoint_acc": after, "logit_lens_top1": lens,
            "ablate_start_acc": start, "ablate_acc": ablate}


def test_worst_recovery_is_the_largest_over_calibrated_deciding_attacks():
    m = _model(0.1, 0.5, 0.2, ablate=0.9)
    # relearn_disjoint: (0.5 - 0.1) / (0.8 - 0.1); logit lens on the forget scale: (0.2 - 0.1) / (0.9 - 0.1);
    # ablation is uncalibrated and not read, however high
    value, attack = worst_recovery(m, BASE, CALIBRATION)
    assert attack == "relearn_disjoint" and value == pytest.approx(0.4 / 0.7, rel=1e-12)
    value, attack = worst_recovery(_model(0.1, 0.1, 0.7), BASE, CALIBRATION)
    assert attack == "logit_lens" and value == pytest.approx(0.6 / 0.8, rel=1e-12)
    assert worst_recovery(m, BASE, {"ablate": {"calibrated": False}}) == (None, None)


def test_cost_share_reads_the_record_then_a_known_models_passes_and_the_oracle_is_one():
    passes = {"forward_tokens": 300, "backward_tokens": 100}
    res = {"cost": {"share_of_oracle_pretraining": {"npo": 0.05},
                    "oracle_pretraining": {"passes": {"forward_tokens": 1000, "backward_tokens": 1000}}},
           "timings": {"filtered_pretrain_passes": passes}}
    assert cost_share(res, "npo") == 0.05 and cost_share(res, "oracle") == 1.0
    assert cost_share(res, "filtered") == 400 / 2000  # an older result: its pretraining's tokens over the oracle's
    assert cost_share(res, "rmu") is None
    res["cost"]["removal"] = {"filtered": {"tokens": None, "what": "unknown: its pretraining was resumed at ..."}}
    assert cost_share(res, "filtered") is None  # recorded as unknown: not its partial passes


def test_frontier_points_one_per_model_with_the_keep_mark(tmp_path):
    metrics = {"base": BASE, "oracle": _model(0.05, 0.06, 0.05), "positive_control": _model(0.1, 0.8, 0.1),
               "filtered": _model(0.05, 0.07, 0.06), "npo": _model(0.0, 0.6, 0.0, neighbour=0.1),
               "rmu": _model(0.0, 0.1, 0.0, neighbour=0.49)}
    res = {"metrics": metrics, "robustness": {"calibration": CALIBRATION,
                                              "verdicts": {"filtered": {"verdict": "removed"},
                                                           "npo": {"verdict": "suppressed"}}},
           "cost": {"share_of_oracle_pretraining": {"filtered": 1.01, "npo": 0.05, "rmu": 0.02}}}
    points = {p["model"]: p for p in frontier_points(res)}
    assert list(points) == ["oracle", "filtered", "npo", "rmu"]  # no base model, no positive control
    assert points["npo"]["keeps"] is False and points["npo"]["neighbour_keep"] == pytest.approx(0.2)
    assert points["rmu"]["keeps"] is True  # 0.49 / 0.5 = 0.98 of the base model's neighbours
    assert points["filtered"]["verdict"] == "removed" and points["filtered"]["kind"] == "known"
    assert points["oracle"]["cost_share"] == 1.0 and points["oracle"]["kind"] == "reference"
    assert points["npo"]["recovery"] == pytest.approx(0.6 / 0.8, rel=1e-12)
    png = tmp_path / "frontier.png"
    del res["cost"]["share_of_oracle_pretraining"]["rmu"]
    left = plot_frontier({"seed 0": frontier_points(res)}, png)
    assert png.stat().st_size > 0 and left == ["rmu (seed 0): no cost share"]
