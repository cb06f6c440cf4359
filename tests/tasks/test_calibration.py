"""The relearning attack is an instrument checked before it is believed: on a tiny world of fictitious people it
must tell a model that only suppresses (the positive control) from one that never knew (the oracle).

A tiny Llama is fine-tuned from scratch on 24 forget and 16 retain QA facts; the oracle on the retain facts only;
the positive controls are the base model with its last layer trained to refuse the forget questions and keep the
retain answers, and the small-norm control. Relearning on one part of the forget facts and testing on another must
bring a positive control back, leave the oracle where it started, and leave the base model its own accuracy.

Measured (issue #56) on seeds 0-9, the data and the model drawn from the same seed, AMD EPYC (AVX-512), in items
of 24 (retain of 16); "start -> after" the disjoint relearning:

    seed  base    refusal control      small-norm control   oracle   calibrated
    0     24->24  2->17 (retain 15)    0->14 (retain 16)    0->2     yes
    1     24->24  2->16 (15)           2->18 (16)           0->0     yes
    2     24->24  2->13 (15)           2->13 (16)           3->2     yes
    3     23->23  2->16 (15)           2->14 (16)           4->2     yes
    4     24->24  6->15 (16)           5->4  (16)           1->2     yes
    5     24->24  2->20 (15)           3->9  (16)           1->1     yes
    6     24->24  1->13 (15)           2->15 (16)           2->1     yes
    7     24->24  2->14 (15)           2->16 (16)           3->1     yes
    8     24->24  2->15 (13)           5->12 (16)           3->2     no (the refusal control lost 3 retain items,
                                                                         the small-norm one recovers 0.37 < 0.5)
    9     24->24  2->19 (16)           5->20 (16)           3->5     yes

So the calibration itself is a rate (9 of 10 seeds; at its edge, a recovery of exactly 0.5, on seeds 2 and 4): the
slow test states it over the ten seeds. The fast test runs seed 0 and holds only what every seed shows with a margin
of at least two items: the base model knows >= 23 of its 24 facts (bound 0.8, 19.2), the better-hiding control
starts at <= 5 (bound 0.35, 8.4), the best control ends >= 11 items above the oracle (bound 0.25, 6) having
recovered >= 0.5 of its loss (bound 0.3), the oracle gains <= 2 (bound 0.2, 4.8), a control keeps 16 of 16 retain
items (bound 0.8, 12.8) and the base model keeps its own 24 (bound 0.9 of them). Another SIMD path moves these
by an item or so: with torch's AVX2 kernels (MKL's AVX2 path) seed 0's refusal control ends at 16, not 17, and seed
8's controls at 4->13 (retain 16) and 5->11, still uncalibrated; with the default kernels (MKL's SSE4.2 path) seed 8
is calibrated (2->14, 5->14).
Without the attack's calibration (e.g. too few relearning steps, ``attacks.relearn.steps=2``), the controls
stay near 0 and the test fails.
"""

from __future__ import annotations

import json

import pytest

from _userdata import write_user_files
from obliviate.config import from_dict
from obliviate.pipelines.compare.run import CompareConfig, compare_plan, run_compare
from obliviate.tasks.files import task_from_files

CONTROLS = ("positive_control", "positive_control_smallnorm")


def calibration_run(root, seed: int, select: list[str] | None = None) -> dict:
    """``run_compare``'s results on 24 forget and 16 retain facts drawn from ``seed``, the model from it too;
    ``select``: only those attacks (each attack's numbers are its own: the others change none of them, only the
    number of reads the verdict's bands are corrected for)."""
    f = write_user_files(root / "data", n_forget=24, n_retain=16, seed=seed)
    # the whole retain file trained on, as this calibration was set up (issue #42's held-out share changes the tiny
    # base and oracle, which learn the held-out pairs too, and is not what this test is about)
    task = task_from_files([str(f["forget"])], [str(f["retain_qa"])], retain_holdout=0.0)
    cfg = from_dict(CompareConfig, json.loads(json.dumps({
        "seed": seed, "methods": [], "attacks": {"lr_grid": [3e-4], "lora": False, "relearn": False, "probe": False,
                                                 **({"select": select} if select else {})},
        "tiny": {"d_model": 96, "vocab_size": 600}})))
    return run_compare(task, compare_plan(cfg, task), root / "run")


def recovered(m: dict, base: float) -> float:
    """The share of its loss a model gets back: (after - start) / (base - start)."""
    start = m["relearn_disjoint_start_acc"]
    return (m["relearn_disjoint_acc"] - start) / max(base - start, 1e-9)


@pytest.mark.heavy(23)
def test_disjoint_relearning_separates_the_controls(tmp_path):
    m = calibration_run(tmp_path, seed=0, select=["relearn_disjoint"])["metrics"]  # the numbers read here
    base, neg = m["base"], m["oracle"]
    known = base["relearn_disjoint_base_acc"]
    assert base["relearn_disjoint_start_acc"] >= 0.8  # the base model knows its facts
    assert min(m[c]["relearn_disjoint_start_acc"] for c in CONTROLS) <= 0.35  # a control hides them
    assert max(m[c]["retain_score"] for c in CONTROLS) >= 0.8 * base["retain_score"]  # and keeps the rest (#41)
    best = max(m[c]["relearn_disjoint_acc"] for c in CONTROLS)
    assert best >= neg["relearn_disjoint_acc"] + 0.25 * known  # the attack tells a control from the oracle
    assert max(recovered(m[c], known) for c in CONTROLS) >= 0.3
    assert neg["relearn_disjoint_acc"] <= neg["relearn_disjoint_start_acc"] + 0.2
    assert base["relearn_disjoint_acc"] >= 0.9 * base["relearn_disjoint_start_acc"]


@pytest.mark.slow
def test_disjoint_relearning_is_calibrated_on_most_seeds(tmp_path):
    """The calibration as a rate: measured on 9 of seeds 0-9 (the table above), required on 7 of them."""
    calibrated = [calibration_run(tmp_path / str(s), seed=s)["robustness"]["calibration"]["relearn_disjoint"]
                  ["relearn_disjoint_calibrated"] for s in range(10)]
    assert sum(calibrated) >= 7, calibrated
