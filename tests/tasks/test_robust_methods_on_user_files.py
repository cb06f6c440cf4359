"""Every robust method of issues #44 and #59 runs with its tiny preset on a user's files (forget JSON Lines with its
own field names, retain CSV) and a random-init model of a real architecture saved with its own tokenizer, from the
CLI: the run finishes, writes its model in safetensors and its outcome, and the weights moved."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from _userdata import save_tiny_model, write_user_files
from obliviate.cli.main import main

CASES = [("undo", "llama"), ("tar", "gpt2"), ("repnoise", "qwen2"), ("sam_npo", "mistral"),
         ("sam_graddiff", "gptneox"), ("jensun", "gemma2"), ("mudman", "gpt2")]


@pytest.mark.parametrize("method,arch", CASES)
def test_runs_on_a_user_model_and_files(method, arch, tmp_path):
    files = write_user_files(tmp_path / "data", n_forget=6, n_retain=6, seed=1)
    model_dir = save_tiny_model(tmp_path / "model", arch, files["texts"], d_model=32)
    out = tmp_path / "run"
    rc = main(["unlearn", "--out", str(out), "--model", str(model_dir), "--method", method, "--no-progress",
               "--forget", str(files["forget"]), "--retain", str(files["retain_qa"]), "unlearn.train.steps=3"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["preset"] == "tiny" and res["unlearn_outcome"]["outcome"] in ("ok", "forgot little", "retain lost")
    after = res["metrics"][method]
    assert all(math.isfinite(after[k]) for k in ("forget_score", "retain_score"))
    assert res["passes"]["forwards"] >= 3 and res["passes"]["backwards"] >= 3  # at least one of each per step
    before, trained = load_file(str(model_dir / "model.safetensors")), load_file(str(out / "model" /
                                                                                     "model.safetensors"))
    assert any(not torch.equal(before[k], trained[k]) for k in before if k in trained)
