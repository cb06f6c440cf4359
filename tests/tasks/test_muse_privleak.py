"""MUSE's PrivLeak setting (issue #28, item 5): Min-40%, no eos, on MUSE's privleak/{forget,holdout} samples
where the corpus has them; the harness's attacks.mia.k (0.2) stays as extra columns."""

import json

import numpy as np
import pytest

from obliviate.attacks.attack import AttackRun
from obliviate.attacks.mia import MIAConfig, mia_attack
from obliviate.eval.mia import mia_auc, min_k_plus_plus_score, min_k_score, token_logprob_stats
from obliviate.evidence.harness import TaskAttackConfig
from obliviate.tasks import load_task


def test_muse_task_declares_muses_mia_setting(tiny_muse):
    task = load_task("muse:news", root=tiny_muse)
    mia = task.meta["mia"]
    assert (mia["k"], mia["add_eos"], mia["source"]) == (0.4, False, "raw")  # no privleak files: the raw documents
    assert mia["members"] == task.forget.docs and mia["nonmembers"] == task.holdout.docs
    d = tiny_muse / "muse" / "news" / "privleak"
    d.mkdir()
    (d / "forget.json").write_text(json.dumps(["Forget sample one.", "Forget sample two."]))
    (d / "holdout.json").write_text(json.dumps(["Holdout sample one.", "Holdout sample two.", "Holdout three."]))
    mia = load_task("muse:news", root=tiny_muse).meta["mia"]
    assert mia["source"] == "privleak" and mia["members"] == ["Forget sample one.", "Forget sample two."]
    assert len(mia["nonmembers"]) == 3


def test_mia_attack_scores_muses_setting_with_mia_k_as_extra_columns(tiny_muse, tiny_model, tiny_tokenizer):
    d = tiny_muse / "muse" / "news" / "privleak"
    d.mkdir()
    members = [f"The forget sample number {i} tells a story." for i in range(5)]
    nonmembers = [f"A holdout text {i} about the weather and the sea." for i in range(5)]
    (d / "forget.json").write_text(json.dumps(members))
    (d / "holdout.json").write_text(json.dumps(nonmembers))
    task = load_task("muse:news", root=tiny_muse)
    out = mia_attack(AttackRun(tiny_model, tiny_tokenizer, task, TaskAttackConfig(), None), MIAConfig())
    stats = token_logprob_stats(tiny_model, tiny_tokenizer, members + nonmembers, add_eos=False)
    for k, tag in ((0.4, ""), (0.2, "_k20")):
        for name, fn in (("min_k", min_k_score), ("min_k_plus_plus", min_k_plus_plus_score)):
            s = np.array([fn(x, k) for x in stats])
            assert out[f"mia_auc_{name}{tag}"] == pytest.approx(mia_auc(s[:5], s[5:]))
    with_eos = token_logprob_stats(tiny_model, tiny_tokenizer, members[:1], add_eos=True)[0]
    assert len(with_eos["token_ids"]) == len(stats[0]["token_ids"]) + 1  # the attack scored no eos
