"""The outcome of an unlearning run (eval/outcome.py): hand-computed cases, then tiny runs that end with it."""

import json

import pytest
import yaml

import obliviate
from obliviate.cli.main import main
from obliviate.eval.outcome import CALIBRATED, MIN_FORGOT, OUTCOMES, RETAIN_SHARE, unlearn_outcome


def scores(forget, retain, chance=0.0):
    return {"forget_score": forget, "forget_chance": chance, "retain_score": retain, "retain_chance": 0.0}


@pytest.mark.parametrize("base,after,outcome,forgot,retained", [
    (scores(1.0, 1.0), scores(0.2, 0.95), "ok", 0.8, 0.95),
    (scores(1.0, 1.0), scores(0.5, 0.9), "ok", 0.5, 0.9),  # both exactly at their thresholds
    (scores(1.0, 1.0), scores(0.6, 1.0), "forgot little", 0.4, 1.0),
    (scores(0.8, 1.0), scores(0.0, 0.5), "retain lost", 1.0, 0.5),
    (scores(1.0, 0.8), scores(0.9, 0.6), "retain lost", 0.1, 0.75),  # both bad: retain lost comes first
    # chance-corrected forget: (0.85 - 0.55) / (0.85 - 0.25) = 0.5 removed, ok; 0.85 -> 0.60 is 0.417
    (scores(0.85, 1.0, 0.25), scores(0.55, 1.0), "ok", 0.5, 1.0),
    (scores(0.85, 1.0, 0.25), scores(0.60, 1.0), "forgot little", 0.25 / 0.6, 1.0),
    (scores(0.25, 1.0, 0.25), scores(0.25, 1.0), "forgot little", 0.0, 1.0),  # a base at chance knew nothing
])
def test_the_rule_on_hand_computed_scores(base, after, outcome, forgot, retained):
    v = unlearn_outcome(base, after, method="npo")
    assert v["outcome"] == outcome in OUTCOMES
    assert v["forgot"] == pytest.approx(forgot) and v["retained"] == pytest.approx(retained)
    assert (v["retain_share"], v["min_forgot"]) == (RETAIN_SHARE, MIN_FORGOT) == (0.9, 0.5)
    assert v["line"].startswith(f"outcome: {outcome}") and "\n" not in v["line"]
    assert ("obliviate tune --method npo" in v["line"]) == (outcome != "ok")
    # the outcome reads no attack: where the forget score dropped, the line says who tells removal from suppression
    assert (CALIBRATED in v["line"]) == (v["forgot"] >= MIN_FORGOT - 1e-9) and "obliviate attack" in CALIBRATED


def test_the_line_says_both_and_thresholds_are_settable():
    v = unlearn_outcome(scores(1.0, 0.8), scores(0.9, 0.6))
    assert "retain lost and forgot little" in v["line"] and "removed 0.100" in v["line"]
    assert "share 0.750, threshold 0.90" in v["line"]
    assert unlearn_outcome(scores(1.0, 1.0), scores(0.5, 0.8), retain_share=0.75, min_forgot=0.4)["outcome"] == "ok"
    # no keep score at all: nothing to lose, the forget drop alone decides
    assert unlearn_outcome({"forget_score": 1.0}, {"forget_score": 0.0})["outcome"] == "ok"


def test_the_line_shows_the_held_out_keep_that_the_keep_score_does_not_read():
    """Issue #56, item 4: retain 1.0 -> 1.0 while the held-out keep (what S-unlearning's R reads) falls 1.0 -> 0.5 is
    said in the line (and results get its numbers); the outcome itself still reads the retain share."""
    base, after = {**scores(1.0, 1.0), "untrained_keep_score": 1.0}, {**scores(0.0, 1.0), "untrained_keep_score": 0.5}
    v = unlearn_outcome(base, after)
    assert v["outcome"] == "ok" and "keep 1.000 -> 1.000" in v["line"]
    assert "held-out keep 1.000 -> 0.500 (share 0.500, below the threshold" in v["line"]
    assert (v["heldout_keep_before"], v["heldout_keep_after"], v["heldout_retained"]) == (1.0, 0.5, 0.5)
    kept = unlearn_outcome(base, {**after, "untrained_keep_score": 0.95})["line"]
    assert "held-out keep 1.000 -> 0.950 (share 0.950)" in kept and "below" not in kept
    assert "held-out" not in unlearn_outcome(scores(1.0, 1.0), scores(0.0, 1.0))["line"]  # no held-out set: not said
    legacy = unlearn_outcome({**scores(1.0, 1.0), "heldout_keep_score": 1.0}, {**scores(0.0, 1.0),
                                                                             "heldout_keep_score": 0.5})
    assert legacy["heldout_retained"] == 0.5  # metrics written before the pooled score had its name read the same
    zero = unlearn_outcome({**base, "untrained_keep_score": 0.0}, after)  # a base at 0 has no share to keep
    assert zero["heldout_retained"] is None and "held-out keep 0.000 -> 0.500 (share n/a)" in zero["line"]


def _unlearn(taught, out, method, lr, steps, *extra):
    return main(["unlearn", "--out", str(out), "--model", str(taught["dir"]), "--forget", str(taught["forget"]),
                 "--retain", str(taught["retain"]), "--method", method, "--no-progress",
                 f"unlearn.train.steps={steps}", f"unlearn.train.lr={lr}", "unlearn.batch_size=4", *extra])


@pytest.mark.parametrize("method,lr,steps,extra,outcome", [
    ("gradascent", 1e-8, 2, (), "forgot little"),  # a step too small to change an answer
    ("gradascent", 1e-1, 2, (), "retain lost"),  # a step that breaks everything
    # a retain weight of 100 holds all 8 retain answers while the forget answers go. Not one lucky point: at the
    # tiny preset's alpha (10) one retain answer of the 8 flips in and out from step to step (and with it the
    # outcome, which then differs between CPUs); at 100 the run is ok from 12 to 30 steps at lr 7e-4 to 2e-3
    ("npo", 1e-3, 16, ("unlearn.params.alpha=100",), "ok"),
])
def test_unlearn_ends_with_the_outcome_in_results_and_card(taught, tmp_path, capsys, method, lr, steps, extra,
                                                          outcome):
    assert _unlearn(taught, tmp_path / "u", method, lr, steps, *extra) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"outcome: {outcome}: forget 1.000 -> ")
    assert ("obliviate tune --method" in last) == (outcome != "ok")
    res = json.loads((tmp_path / "u" / "results.json").read_text())
    assert "unlearn_verdict" not in res  # renamed: the verdict is attack's and compare's
    v = res["unlearn_outcome"]
    assert v["outcome"] == outcome and v["line"] == last
    assert v["forget_after"] == res["metrics"][method]["forget_score"]
    card = (tmp_path / "u" / "model" / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["obliviate"]["outcome"] == outcome and "## Outcome" in card
    assert "verdict" not in meta["obliviate"] and "## Verdict" not in card


def test_the_api_gives_the_same_outcome(taught, caplog):
    caplog.set_level("INFO", logger="obliviate")
    _, info = obliviate.unlearn(taught["model"], taught["tokenizer"], taught["task"], "gradascent",
                                train={"lr": 1e-1, "steps": 2}, batch_size=4)
    assert info["outcome"]["outcome"] == "retain lost" and info["before"]["retain_score"] == 1.0
    assert info["outcome"]["line"] in caplog.text and "verdict" not in info  # logged, not printed
    _, info = obliviate.unlearn(taught["model"], taught["tokenizer"], taught["task"], "gradascent",
                                train={"lr": 1e-1, "steps": 2}, batch_size=4, judge=False)
    assert "outcome" not in info and "before" not in info
