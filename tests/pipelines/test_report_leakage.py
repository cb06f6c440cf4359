"""Issue #42, item 2: the comparison's report flags high ``relearn_disjoint_leakage`` beside the recovery it inflates
(the held-out fold's answers seen in the training fold), and says nothing where the folds do not leak."""

from __future__ import annotations

from obliviate.attacks.relearn_disjoint import LEAKAGE_FLAG
from obliviate.pipelines.compare.report import main_table, recovery_lines


def _metrics(leak):
    m = {"relearn_disjoint_start_acc": 0.1, "relearn_disjoint_acc": 0.6, "relearn_disjoint_leakage": leak}
    return {"base": {"relearn_disjoint_base_acc": 0.8, "relearn_disjoint_leakage": leak}, "npo": m,
            "oracle": {**m, "relearn_disjoint_start_acc": 0.0, "relearn_disjoint_acc": 0.3}}


def test_high_leakage_is_flagged_beside_the_recovery():
    lines = recovery_lines(_metrics(0.5))
    npo = next(x for x in lines if x.startswith("- **npo**"))
    assert "71% of what it lost brought back" in npo  # (0.6 - 0.1) / (0.8 - 0.1)
    assert "High leakage: 50% of the held-out answers' rare words" in npo and "inflates this recovery" in npo
    assert "High leakage" in lines[-1]  # the oracle's too: its band is inflated the same way
    cols, _ = main_table(_metrics(0.5), None)
    assert any(c.startswith("relearn_disjoint_acc (leakage 0.50)") for c in cols)


def test_low_or_unknown_leakage_is_not_flagged():
    for leak in (None, 0.0, LEAKAGE_FLAG - 0.01):
        assert not any("leakage" in x.lower() for x in recovery_lines(_metrics(leak)))
        cols, _ = main_table(_metrics(leak), None)
        assert not any("leakage" in c for c in cols)
    assert any("High leakage" in x for x in recovery_lines(_metrics(LEAKAGE_FLAG)))
