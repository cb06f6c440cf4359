"""The relearning attack is an instrument checked before it is believed: on a tiny world of fictitious people it
must tell a model that only suppresses (the positive control) from one that never knew (the oracle).

A tiny Llama is fine-tuned from scratch on 24 forget and 16 retain QA facts; the oracle on the retain facts only;
the positive control is the base model with its last layer trained to refuse the forget questions and keep the
retain answers. Relearning on one part of the forget facts and testing on another must bring a positive
control back to >= 70% of the base model's held-out accuracy, leave the oracle no higher than 0.1 above where it
started, and leave the base model with >= 0.9 of its own accuracy. Measured when written (seed 0, issue #41's
rule): the refusal control 0.08 -> 0.71, the small-norm control 0.00 -> 0.58, the oracle 0.00 -> 0.08, both
controls keeping at least 0.94 of the retain score. With 16 forget facts (15 scored) the oracle band is 0.27 wide,
wider than half of what a control recovers, and no attack can be calibrated at all: the rule says so rather than
calibrate on too few items.
Without the attack's calibration (e.g. too few relearning steps, ``attacks.relearn.steps=2``), the controls
stay near 0 and the test fails.
"""

from __future__ import annotations

import json

import pytest

from _userdata import write_user_files
from obliviate.config import from_dict
from obliviate.pipelines.compare.run import CompareConfig, run_compare
from obliviate.tasks.files import task_from_files


@pytest.mark.heavy(23)
def test_disjoint_relearning_separates_the_controls(tmp_path):
    f = write_user_files(tmp_path / "data", n_forget=24, n_retain=16, seed=0)
    # the whole retain file trained on, as this calibration was set up (issue #42's held-out share changes the tiny
    # base and oracle, which learn the held-out pairs too, and is not what this test is about)
    task = task_from_files([str(f["forget"])], [str(f["retain_qa"])], retain_holdout=0.0)
    cfg = from_dict(CompareConfig, json.loads(json.dumps({
        "methods": [], "attacks": {"lr_grid": [3e-4], "lora": False, "relearn": False, "probe": False},
        "tiny": {"d_model": 96, "vocab_size": 600}})))
    res = run_compare(task, cfg, tmp_path / "run", progress=False)
    m = res["metrics"]
    base, pos, neg = m["base"], m["positive_control"], m["oracle"]
    assert base["relearn_disjoint_start_acc"] >= 0.9  # the base model knows its facts
    assert pos["relearn_disjoint_start_acc"] <= 0.1  # the control hides them
    assert pos["retain_score"] >= 0.9 * base["retain_score"]  # and keeps the rest (issue #41)
    best = max(m[c]["relearn_disjoint_acc"] for c in ("positive_control", "positive_control_smallnorm"))
    assert best >= 0.7 * base["relearn_disjoint_base_acc"]
    assert neg["relearn_disjoint_acc"] <= neg["relearn_disjoint_start_acc"] + 0.1
    assert base["relearn_disjoint_acc"] >= 0.9 * base["relearn_disjoint_start_acc"]
    assert res["robustness"]["calibration"]["relearn_disjoint"]["relearn_disjoint_calibrated"] is True
