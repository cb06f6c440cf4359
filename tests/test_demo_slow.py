"""The full demo on a non-default seed (slow: run with `make test-all`).

Checks the acceptance points that need real training: the base model answers >= 90% of the
forget- and retain-domain QA, at least one method reaches S-unlearning >= 0.6, and every method
has a relearning-attack number in the report.
"""

import json

import pytest

from obliviate.cli.main import main


@pytest.mark.slow
@pytest.mark.parametrize("seed", [7])
def test_demo_acceptance(tmp_path, seed):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--seed", str(seed), "--no-progress"]) == 0
    m = json.loads((out / "results.json").read_text())["metrics"]
    assert m["base"]["forget_qa_em"] >= 0.9
    assert m["base"]["retain_qa_em"] >= 0.9
    methods = ["graddiff", "npo", "simnpo", "rmu"]
    assert max(m[k]["s_unlearning"] for k in methods) >= 0.6
    report = (out / "report.md").read_text()
    for k in methods:
        assert m[k]["relearn_acc"] is not None
        assert f"**{k}**" in report
