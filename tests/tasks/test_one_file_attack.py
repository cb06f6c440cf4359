"""Adding an attack is one file (issue #43): a module that registers an attack with its name, config, ``applies``,
``run`` and its verdict read, imported and nothing else changed, runs in ``compare`` on every model, takes its
settings from ``attacks.<name>.<key>``, and is calibrated against the controls like the attacks of the package.
Measured when written (seed 0, the user files of tests/tasks/test_calibration.py): the refusal control 0.08 -> 1.00,
the small-norm control 0.00 -> 0.58, the oracle 0.00 -> 0.08; at lr 3e-3 and 20 steps the oracle gained 0.25 and
the attack was not calibrated, so the test can fail."""

from __future__ import annotations

import json

import pytest

from _userdata import write_user_files
from obliviate.attacks.attack import ATTACKS
from obliviate.config import from_dict
from obliviate.pipelines.compare.run import CompareConfig, compare_plan, run_compare
from obliviate.tasks.files import task_from_files
from tests._one_file import registered_from_file

ATTACK = '''
"""A short relearning: ``steps`` fine-tuning steps on half A of the forget facts, half B scored."""
from dataclasses import dataclass

from obliviate.attacks.attack import AttackRead, read_counts, register_attack
from obliviate.attacks.relearn import RelearnConfig, relearn_attack
from obliviate.attacks.scoring import qa_score_fn


@dataclass
class ShortConfig:
    steps: int = 30
    lr: float = 3e-4


@register_attack("short_relearn", applies=lambda task: task.forget_halves() is not None, config=ShortConfig,
                 needs="at least 2 forget QA pairs to split in halves",
                 reads=AttackRead("short_relearn_start_acc", "short_relearn_acc", label="a short relearning"))
def short_relearn(r, cfg: ShortConfig) -> dict:
    a, b = r.task.forget_halves(r.cfg.seed)
    rc = RelearnConfig(steps=cfg.steps, lr=cfg.lr, eval_every=cfg.steps, batch_size=4, seed=r.cfg.seed)
    res = relearn_attack(r.model, r.tokenizer, r.task.prompt.pairs(list(a), r.tokenizer),
                         qa_score_fn(r.tokenizer, r.task, b[:r.cfg.max_eval]), rc)
    return {"short_relearn_start_acc": res["initial_acc"], "short_relearn_acc": res["final_acc"],
            "short_relearn_steps": cfg.steps, **read_counts("short_relearn", len(b[:r.cfg.max_eval]))}
'''


@pytest.fixture
def short_relearn(tmp_path):
    yield from registered_from_file(tmp_path, "short_relearn", ATTACK, ATTACKS)


@pytest.mark.heavy(20)
def test_an_attack_in_one_file_runs_and_is_calibrated_in_compare(tmp_path, short_relearn):
    f = write_user_files(tmp_path / "data", n_forget=24, n_retain=16, seed=0)
    task = task_from_files([str(f["forget"])], [str(f["retain_qa"])], retain_holdout=0.0)
    cfg = from_dict(CompareConfig, json.loads(json.dumps({
        "methods": [], "attacks": {"select": ["short_relearn"], "short_relearn": {"steps": 30}},
        "tiny": {"d_model": 96, "vocab_size": 600}})))
    res = run_compare(task, compare_plan(cfg, task), tmp_path / "run")
    m = res["metrics"]
    half_b = len(task.forget_halves(cfg.attacks.seed)[1])
    for name in ("base", "oracle", "positive_control"):
        assert m[name]["attacks_run"] == ["short_relearn"] and m[name]["short_relearn_steps"] == 30, name
        # the items its after-score is a mean over (half B, at most max_eval), the last step's: no maximum
        assert (m[name]["short_relearn_items"], m[name]["short_relearn_variants"]) == (half_b, 1), name
    c = res["robustness"]["calibration"]["short_relearn"]
    assert c["label"] == "a short relearning"
    pos, neg = c["controls"]["positive_control"], m["oracle"]
    assert pos["positive"] == [m["positive_control"][k] for k in ("short_relearn_start_acc", "short_relearn_acc")]
    assert pos["negative"] == [neg["short_relearn_start_acc"], neg["short_relearn_acc"]]
    assert c["calibrated"] is True and c["short_relearn_calibrated"] is True
    report = (tmp_path / "run" / "report.md").read_text()
    assert "`short_relearn` (a short relearning): calibrated on" in report
