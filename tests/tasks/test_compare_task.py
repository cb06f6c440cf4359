"""``obliviate compare --task ember:<concept>``: every method on a tiny model first fine-tuned on the concept."""

from __future__ import annotations

import json

import pytest

from obliviate.cli.main import main
from obliviate.methods import METHODS, method_names
from obliviate.utils import data_dir


def test_compare_every_method_on_an_ember_concept(tmp_path):
    if not (data_dir() / "ember" / "mc_questions.json").exists():
        pytest.skip("EMBER data not present")
    out = tmp_path / "cmp"
    # every method that runs on documents (none of the IdK ones) and trains: runs.<m> of a method the compare
    # does not run is refused
    steps = [f"runs.{m}.steps=2" for m in method_names()
             if METHODS[m].kind != "edit" and not getattr(METHODS[m], "needs_idk", False)]
    rc = main(["compare", "--task", "ember:harry_potter", "--limit", "6", "--out", str(out), "--no-progress",
               "finetune.epochs=2", "tiny.d_model=32", "tiny.vocab_size=400", "attacks.relearn.steps=2",
               "attacks.relearn.eval_every=1", "attacks.lr_grid=[1e-3]", "attacks.lora=false", *steps])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    # every method runs on documents (none of them needs QA pairs: EMBER's forget data are sentences)
    expected = {m for m in method_names() if not getattr(METHODS[m], "needs_idk", False)}
    assert set(res["metrics"]) == expected | {"base", "oracle", "positive_control"}
    assert set(res["robustness"]["verdicts"]) == expected
    assert res["task"]["name"] == "ember:harry_potter" and res["task"]["forget"] == "6 documents"
    for name in expected:
        assert "forget_score" in res["metrics"][name] and "relearn_acc" in res["metrics"][name], name
    assert (out / "report.html").exists() and (out / "plots" / "forget_keep.png").exists()
    assert set(res["model_dirs"]) == expected | {"base", "oracle", "positive_control"}


def test_compare_oracle_needs_a_task_or_model(tmp_path, capsys):
    assert main(["compare", "--out", str(tmp_path / "c"), "--oracle", str(tmp_path)]) == 2
    assert "--oracle needs --model" in capsys.readouterr().err
