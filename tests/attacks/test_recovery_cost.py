"""Issue #41: a recovery cost that measures. Log-spaced reads from step 1, bounds instead of blanks, the attacker's
setting chosen on V and the cost read on B, the budget-limited flag and the ratio to learning, on hand-built curves."""

import pytest

from obliviate.attacks.relearn import selected_metrics
from obliviate.attacks.relearn import (LOG_RATIO, RelearnConfig, cost_text, curve_auc, learning_ratio, log_steps,
                                       ratio_text, recovery_cost, relearn_attack)
from obliviate.attacks.relearn_disjoint import _cost, add_learning_ratios
from obliviate.errors import ConfigError
from obliviate.evidence.verdict import _shown

TOKENS = 157  # tokens per step, about the demo's


def _tok(curve):
    return [(s * TOKENS, v) for s, v in curve]


def _run(tag, v, b):
    return (tag, {"tokens_per_step": TOKENS, "tokens_at": [s * TOKENS for s, _ in b]}, v, b)


# ------------------------------------------------------------------ the reads


def test_log_schedule_reads_from_step_one_and_ends_at_the_budget():
    assert log_steps(30) == [0, 1, 2, 3, 5, 8, 13, 21, 30]
    assert log_steps(6) == [0, 1, 2, 3, 6] and log_steps(1) == [0, 1] and log_steps(0) == [0]
    for steps in range(1, 200):
        s = log_steps(steps)
        assert s[:2] == [0, 1] and s[-1] == steps and s == sorted(set(s))
        assert all(b / a <= LOG_RATIO ** 1.5 + 0.05 for a, b in zip(s[1:], s[2:]))  # about a doubling at most
    assert len(log_steps(1000)) < 20  # log-spaced: few reads for a long budget
    assert RelearnConfig(steps=30, reads="log").read_steps() == log_steps(30)
    assert RelearnConfig(steps=12, eval_every=5).read_steps() == [0, 5, 10, 12]
    with pytest.raises(ConfigError, match="reads"):
        RelearnConfig(reads="sometimes")


def test_the_area_under_a_log_read_curve_is_still_the_mean_over_the_budget():
    ramp = [[s, s / 30] for s in log_steps(30)]  # a linear ramp read at uneven steps: the area is still 1/2
    assert curve_auc(ramp) == pytest.approx(0.5)
    step = [[s, 1.0 if s >= 15 else 0.0] for s in log_steps(30)]  # reads 13 and 21 bracket the jump at 15
    assert 0.4 < curve_auc(step) < 0.6


def test_the_attack_reads_its_curve_at_the_log_steps(world_tokenizer, world_model):
    texts = ["Zalosis was first recorded in Mousora.", "A physician wrote about Zalosis in 1898."]
    cfg = RelearnConfig(steps=6, reads="log", batch_size=2, lr=1e-3)
    res = relearn_attack(world_model, world_tokenizer, texts, lambda m: 0.0, cfg)
    assert [s for s, _ in res["curve"]] == [0, 1, 2, 3, 6]
    assert res["tokens_at"] == [s * res["tokens_per_step"] for s in (0, 1, 2, 3, 6)]


# ------------------------------------------------------------------ bounds, never a blank


def test_a_cost_under_the_first_read_is_at_most_that_read():
    c = recovery_cost([_tok([[0, 0.0], [1, 0.9], [2, 1.0], [3, 1.0]])], 0.0, 1.0, n_params=10)
    assert c["recovery_cost_tokens"] == TOKENS and c["recovery_cost_bound"] == "at_most"
    assert c["recovery_cost_flops"] == 6.0 * 10 * TOKENS and c["recovery_cost_reason"] is None
    assert cost_text(c["recovery_cost_tokens"], c["recovery_cost_bound"]) == f"≤ {TOKENS}"


def test_a_cost_never_reached_is_above_the_budget_and_not_applicable_stays_null_with_a_reason():
    curve = _tok([[s, 0.1 * s / 30] for s in log_steps(30)])
    c = recovery_cost([curve], 0.0, 1.0)
    assert c["recovery_cost_tokens"] == 30 * TOKENS == c["recovery_budget_tokens"]
    assert c["recovery_cost_bound"] == "above_budget"
    assert cost_text(c["recovery_cost_tokens"], c["recovery_cost_bound"]) == f"> {30 * TOKENS}"
    nothing = recovery_cost([curve], 1.0, 1.0)  # the model lost nothing
    assert nothing["recovery_cost_tokens"] is None and nothing["recovery_cost_bound"] is None
    assert "nothing to recover" in nothing["recovery_cost_reason"]
    unknown = recovery_cost([curve], 0.0, None)
    assert unknown["recovery_cost_tokens"] is None and "base" in unknown["recovery_cost_reason"]
    assert cost_text(None, None) == "n/a"


def test_two_models_that_differ_get_different_costs():
    fast = lambda s: min(1.0, s / 1.5)  # noqa: E731 - back at step 1 (0.67)
    slow = lambda s: min(1.0, s / 5)  # noqa: E731 - half back at step 2.5
    every5 = [0, 5, 10, 15, 20, 25, 30]
    # read every 5 steps, both show the floor: step 5
    assert recovery_cost([_tok([[s, fast(s)] for s in every5])], 0.0, 1.0)["recovery_cost_tokens"] == 5 * TOKENS
    assert recovery_cost([_tok([[s, slow(s)] for s in every5])], 0.0, 1.0)["recovery_cost_tokens"] == 5 * TOKENS
    a = recovery_cost([_tok([[s, fast(s)] for s in log_steps(30)])], 0.0, 1.0)
    b = recovery_cost([_tok([[s, slow(s)] for s in log_steps(30)])], 0.0, 1.0)
    assert (a["recovery_cost_tokens"], a["recovery_cost_bound"]) == (TOKENS, "at_most")
    assert (b["recovery_cost_tokens"], b["recovery_cost_bound"]) == (3 * TOKENS, "exact")


# ------------------------------------------------------------------ the attacker chooses on V, the cost is read on B


def test_the_setting_is_chosen_on_v_even_where_b_prefers_another():
    steps = log_steps(30)
    # "v_fast" wins V back by step 2 but B only by step 13; "b_fast" wins B back at step 1 but V only at step 21
    v_fast = _run("v_fast", [[s, 1.0 if s >= 2 else 0.0] for s in steps], [[s, 1.0 if s >= 13 else 0.0] for s in steps])
    b_fast = _run("b_fast", [[s, 1.0 if s >= 21 else 0.0] for s in steps], [[s, 1.0 if s >= 1 else 0.0] for s in steps])
    c = _cost([[b_fast, v_fast]], [1.0], 0.0, 1.0, 1)
    assert c["recovery_cost_setting"] == ["v_fast"]
    assert c["recovery_cost_chosen_on"] == "V" and c["recovery_cost_scored_on"] == "B"
    assert (c["recovery_cost_tokens"], c["recovery_cost_bound"]) == (13 * TOKENS, "exact")  # B's, under v_fast
    # two folds choose each its own setting; the cost reads the mean of the chosen B curves
    c2 = _cost([[b_fast, v_fast], [_run("b_fast", v_fast[2], b_fast[3]), _run("v_fast", b_fast[2], v_fast[3])]],
               [1.0, 1.0], 0.0, 1.0, 1)
    assert c2["recovery_cost_setting"] == ["v_fast", "b_fast"]
    # no base score on V: the setting with the larger area under V
    assert _cost([[b_fast, v_fast]], None, 0.0, 1.0, 1)["recovery_cost_setting"] == ["v_fast"]


def test_a_choice_at_the_budgets_last_read_with_a_rising_curve_is_budget_limited():
    steps = log_steps(30)
    rising = _run("lr", [[s, s / 30] for s in steps], [[s, s / 60] for s in steps])
    flat = _run("lr", [[s, min(1.0, s / 5)] for s in steps], [[s, min(1.0, s / 5)] for s in steps])
    m = selected_metrics("relearn_disjoint", [[rising], [rising], [flat]], base=1.0)
    assert m["relearn_disjoint_best_step"] == [30, 30, 5]
    assert m["relearn_disjoint_budget_limited"] is True and m["relearn_disjoint_budget_limited_folds"] == 2
    assert selected_metrics("relearn_disjoint", [[flat]], base=1.0)["relearn_disjoint_budget_limited"] is False


# ------------------------------------------------------------------ the ratio to learning


def test_the_ratio_to_learning_on_a_hand_built_pair():
    learn = {"tokens": 13 * TOKENS, "bound": "exact"}
    assert learning_ratio(learn, {"tokens": 13 * TOKENS, "bound": "exact"})["recovery_cost_vs_learning"] == 1.0
    r = learning_ratio(learn, {"tokens": 3 * TOKENS, "bound": "exact"})
    assert r["recovery_cost_vs_learning"] == pytest.approx(13 / 3) and r["recovery_cost_vs_learning_bound"] == "exact"
    r = learning_ratio(learn, {"tokens": TOKENS, "bound": "at_most"})  # back under the first read: at least 13x
    assert (r["recovery_cost_vs_learning"], r["recovery_cost_vs_learning_bound"]) == (13.0, "at_least")
    r = learning_ratio(learn, {"tokens": 30 * TOKENS, "bound": "above_budget"})  # slower than the budget: < 13/30
    assert r["recovery_cost_vs_learning"] == pytest.approx(13 / 30)
    assert r["recovery_cost_vs_learning_bound"] == "at_most"
    assert ratio_text(13.0, "at_least") == "≥ 13" and ratio_text(13 / 30, "at_most") == "≤ 0.43"
    never = {"tokens": 30 * TOKENS, "bound": "above_budget"}
    r = learning_ratio(never, never)
    assert r["recovery_cost_vs_learning"] is None and "neither" in r["recovery_cost_vs_learning_reason"]
    r = learning_ratio(learn, {"tokens": 0, "bound": "exact"})
    assert r["recovery_cost_vs_learning"] is None and "before any training" in r["recovery_cost_vs_learning_reason"]


def test_the_oracles_learning_cost_is_written_into_every_models_metrics():
    def learned(tokens, bound):
        return {"learning_cost_tokens": tokens, "learning_cost_bound": bound, "learning_cost_reason": None}

    metrics = {"base": {"learning_cost_tokens": None, "learning_cost_bound": None,
                        "learning_cost_reason": "nothing to recover"},
               "oracle": learned(2000, "exact"), "rmu": learned(500, "exact"), "ctl": learned(157, "at_most"),
               "graddiff": learned(4000, "exact"), "other": {}}
    add_learning_ratios(metrics)
    assert metrics["oracle"]["recovery_cost_vs_learning"] == 1.0  # as if never seen, by construction
    assert metrics["rmu"]["recovery_cost_vs_learning"] == 4.0  # back 4x faster than it could be learned
    assert metrics["ctl"]["recovery_cost_vs_learning_bound"] == "at_least"
    assert metrics["graddiff"]["recovery_cost_vs_learning"] == 0.5
    assert metrics["base"]["recovery_cost_vs_learning"] is None and metrics["base"]["recovery_cost_vs_learning_reason"]
    assert "recovery_cost_vs_learning" not in metrics["other"]  # no learning run: no ratio
    assert _shown(metrics["ctl"], "recovery_cost_vs_learning") == "≥ 13"
    alone = {"rmu": learned(500, "exact")}  # no oracle in the comparison
    add_learning_ratios(alone)
    assert alone["rmu"]["recovery_cost_vs_learning"] is None
    assert "oracle" in alone["rmu"]["recovery_cost_vs_learning_reason"]


def test_the_report_shows_the_bounds():
    assert _shown({"recovery_cost_tokens": 157, "recovery_cost_bound": "at_most"}, "recovery_cost_tokens") == "≤ 157"
    assert _shown({"recovery_cost_tokens": 4706, "recovery_cost_bound": "above_budget"},
                  "recovery_cost_tokens") == "> 4706"
    assert _shown({"recovery_cost_tokens": 786, "recovery_cost_bound": "exact"}, "recovery_cost_tokens") == "786"
    assert _shown({"recovery_cost_tokens": None, "recovery_cost_bound": None}, "recovery_cost_tokens") == "n/a"
    assert _shown({"probe_acc": 0.5}, "probe_acc") == 0.5
