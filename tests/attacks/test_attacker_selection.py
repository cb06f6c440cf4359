"""Issue #28, items 2, 3, 6 and 10a: entity-grouped folds and their leakage check, the attacker's choice on a
selection split V (not on the reported split B), the best step, and the one recovery cost."""

import json

import pytest

from obliviate.attacks.relearn import pick, selected_metrics
from obliviate.attacks.relearn import recovery_cost
from obliviate.attacks.relearn_disjoint import _cost, answer_leakage, leakage_metrics
from obliviate.evidence.verdict import robustness_summary
from obliviate.tasks import load_task
from obliviate.tasks.base import Data, Task
from obliviate.tasks.files import build_file_task
from obliviate.utils import data_dir


def _task(groups, answers=None):
    qa = [(f"q{i}?", (answers or {}).get(i, f"a{i}")) for i in range(len(groups))]
    return Task("t", forget=Data(qa=qa), retain=Data(qa=[("r?", "r")]), groups=groups)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_folds_keep_each_group_whole_and_rotate(seed):
    groups = [f"g{i // 3}" for i in range(15)]  # 5 entities of 3 facts
    task = _task(groups)
    of = dict(zip(task.forget.qa, groups))
    folds = task.forget_folds(seed)
    assert len(folds) == 3
    for a, v, b in folds:
        ga, gv, gb = ({of[x] for x in part} for part in (a, v, b))
        assert not (ga & gb) and not (gv & gb) and not (ga & gv)  # no entity on two sides
        assert sorted(a + v + b) == sorted(task.forget.qa)
    assert sorted(x for _, _, b in folds for x in b) == sorted(task.forget.qa)  # each fact reported once


def test_two_groups_train_on_one_and_choose_and_report_on_the_other():
    task = _task(["x"] * 4 + ["y"] * 4)
    of = dict(zip(task.forget.qa, task.groups))
    folds = task.forget_folds(0)
    assert len(folds) == 4
    for a, v, b in folds:
        assert len({of[x] for x in a}) == 1 and {of[x] for x in v} == {of[x] for x in b} != {of[a[0]]}
        assert not set(v) & set(b)


def test_leakage_reads_rare_words_shared_inside_an_entity():
    # the rare word "zorblax" is in two answers of entity x: a split through x leaks it, one by entity does not
    answers = {0: "zorblax wrote it", 1: "zorblax again", 2: "plain", 3: "plain too", 4: "other", 5: "other one"}
    corpus = list(answers.values())
    assert answer_leakage([([answers[0]], [answers[1]])], corpus) == 1.0  # "zorblax" (2 answers) seen in training
    assert answer_leakage([([answers[2]], [answers[1]])], corpus) == 0.0
    assert answer_leakage([([answers[2]], ["unique words only"])], corpus + ["unique words only"]) is None
    grouped = _task(["x", "x", "y", "y", "z", "z"], answers)
    m = leakage_metrics(grouped, grouped.forget_folds(0))
    assert m["relearn_disjoint_leakage"] <= m["relearn_disjoint_leakage_between_groups"] + 1e-12
    split_through = [([("q0?", answers[0])], [], [("q1?", answers[1])])]
    m2 = leakage_metrics(grouped, split_through)
    assert m2["relearn_disjoint_leakage"] == 1.0 and m2["relearn_disjoint_leakage_between_groups"] < 1.0


def test_tofu_groups_are_authors_and_the_per_author_split_leaks_no_more_than_between_authors():
    if not (data_dir() / "tofu" / "forget01.json").exists():
        pytest.skip("TOFU data not present")
    task = load_task("tofu:forget01", limit=40)
    assert task.groups == [f"forget01/author{i // 20}" for i in range(40)]
    for seed in (0, 1, 2):
        m = leakage_metrics(task, task.forget_folds(seed))
        assert m["relearn_disjoint_leakage"] is not None
        assert m["relearn_disjoint_leakage"] <= m["relearn_disjoint_leakage_between_groups"] + 1e-12


def test_a_file_task_takes_its_groups_from_a_group_field(tmp_path):
    rows = [{"question": f"q{i}", "answer": f"a{i}", "author": f"au{i % 2}"} for i in range(4)]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "r.jsonl").write_text(json.dumps({"question": "r", "answer": "s"}) + "\n")
    task = build_file_task("u", tmp_path, {"forget": {"path": "f.jsonl", "group": "author"}, "retain": "r.jsonl"})
    assert task.groups == ["au0", "au1", "au0", "au1"]
    assert build_file_task("u", tmp_path, {"forget": "f.jsonl", "retain": "r.jsonl"}).groups is None


def _run(tag, v, b, tokens_per_step=10):
    return (tag, {"tokens_per_step": tokens_per_step, "tokens_at": [s * tokens_per_step for s, _ in b]}, v, b)


def test_the_attacker_chooses_setting_and_step_on_v_and_the_score_is_read_on_b():
    # setting "lo": V peaks at step 5 (0.6), where B is 0.3; B itself peaks at step 10 (0.9) under "hi"
    lo = _run("lo", [[0, 0.0], [5, 0.6], [10, 0.2]], [[0, 0.0], [5, 0.3], [10, 0.1]])
    hi = _run("hi", [[0, 0.0], [5, 0.1], [10, 0.5]], [[0, 0.0], [5, 0.2], [10, 0.9]])
    assert pick([lo, hi]) == ("lo", 5, 0.6, 0.3)
    m = selected_metrics("relearn_disjoint", [[lo, hi]], base=1.0)
    assert m["relearn_disjoint_acc"] == 0.3 and m["relearn_disjoint_best_step"] == [5]
    assert m["relearn_disjoint_acc_optimistic"] == 0.9  # chosen on B itself: the upward-biased number
    assert m["relearn_disjoint_final_acc"] == 0.1 and m["relearn_disjoint_setting"] == ["lo"]
    assert m["relearn_disjoint_by_setting"] == {"lo": 0.1, "hi": 0.9}


def test_recovery_cost_is_half_the_lost_score_on_the_cheapest_setting():
    slow = [(0, 0.2), (100, 0.4), (200, 0.5), (300, 0.8)]
    fast = [(0, 0.2), (50, 0.3), (150, 0.55)]
    # target = 0.2 + 0.5 (0.8 - 0.2) = 0.5: slow reaches it at 200 tokens, fast at 150
    assert recovery_cost([slow, fast], 0.2, 0.8, n_params=1000) == {
        "recovery_cost_tokens": 150, "recovery_cost_flops": 6.0 * 1000 * 150, "recovery_target": pytest.approx(0.5),
        "recovery_cost_bound": "exact", "recovery_cost_reason": None, "recovery_budget_tokens": 300}
    never = recovery_cost([slow], 0.2, 1.8)  # 1.0 never reached: above the budget, not a blank
    assert never["recovery_cost_tokens"] == 300 and never["recovery_cost_bound"] == "above_budget"
    assert recovery_cost([slow], 0.8, 0.8)["recovery_cost_tokens"] is None  # nothing was lost
    # a loss falls towards the base: 4.0 -> target 3.0
    assert recovery_cost([[(0, 4.0), (10, 3.5), (20, 2.9)]], 4.0, 2.0, higher_is_better=False)[
        "recovery_cost_tokens"] == 20
    lo = _run("lo", [[0, 0.0], [2, 0.3], [5, 0.6]], [[0, 0.0], [2, 0.3], [5, 0.6]], tokens_per_step=10)
    assert _cost([[lo]], [1.0], 0.0, 1.0, 1)["recovery_cost_tokens"] == 50


def test_the_ratio_to_the_oracles_cost_is_gone():
    metrics = {"base": {"forget_score": 1.0}, "oracle": {"recovery_cost_tokens": 200},
               "a": {"recovery_cost_tokens": 400}}
    robustness_summary(metrics)
    assert not any("recovery_cost_vs_oracle" in m for m in metrics.values())  # recovery_cost_vs_learning instead
