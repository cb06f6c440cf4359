"""The verdict of an unlearning run (eval/outcome.py): hand-computed cases, then tiny runs that end with it."""

import json

import pytest
import yaml

import obliviate
from obliviate.cli.main import main
from obliviate.eval.outcome import MIN_FORGOT, RETAIN_SHARE, unlearn_verdict


def scores(forget, retain, chance=0.0):
    return {"forget_score": forget, "forget_chance": chance, "retain_score": retain, "retain_chance": 0.0}


@pytest.mark.parametrize("base,after,verdict,forgot,retained", [
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
def test_the_rule_on_hand_computed_scores(base, after, verdict, forgot, retained):
    v = unlearn_verdict(base, after, method="npo")
    assert v["verdict"] == verdict
    assert v["forgot"] == pytest.approx(forgot) and v["retained"] == pytest.approx(retained)
    assert (v["retain_share"], v["min_forgot"]) == (RETAIN_SHARE, MIN_FORGOT) == (0.9, 0.5)
    assert v["line"].startswith(f"verdict: {verdict}") and "\n" not in v["line"]
    assert ("obliviate tune --method npo" in v["line"]) == (verdict != "ok")


def test_the_line_says_both_and_thresholds_are_settable():
    v = unlearn_verdict(scores(1.0, 0.8), scores(0.9, 0.6))
    assert "retain lost and forgot little" in v["line"] and "removed 0.100" in v["line"]
    assert "share 0.750, threshold 0.90" in v["line"]
    assert unlearn_verdict(scores(1.0, 1.0), scores(0.5, 0.8), retain_share=0.75, min_forgot=0.4)["verdict"] == "ok"
    # no keep score at all: nothing to lose, the forget drop alone decides
    assert unlearn_verdict({"forget_score": 1.0}, {"forget_score": 0.0})["verdict"] == "ok"


def _unlearn(taught, out, method, lr, steps, *extra):
    return main(["unlearn", "--out", str(out), "--model", str(taught["dir"]), "--forget", str(taught["forget"]),
                 "--retain", str(taught["retain"]), "--method", method, "--no-progress",
                 f"unlearn.train.steps={steps}", f"unlearn.train.lr={lr}", "unlearn.batch_size=4", *extra])


@pytest.mark.parametrize("method,lr,steps,extra,verdict", [
    ("gradascent", 1e-8, 2, (), "forgot little"),  # a step too small to change an answer
    ("gradascent", 1e-1, 2, (), "retain lost"),  # a step that breaks everything
    # a retain weight of 100 holds all 8 retain answers while the forget answers go. Not one lucky point: at the
    # tiny preset's alpha (10) one retain answer of the 8 flips in and out from step to step (and with it the
    # verdict, which then differs between CPUs); at 100 the run is ok from 12 to 30 steps at lr 7e-4 to 2e-3
    ("npo", 1e-3, 16, ("unlearn.params.alpha=100",), "ok"),
])
def test_unlearn_ends_with_the_verdict_in_results_and_card(taught, tmp_path, capsys, method, lr, steps, extra,
                                                          verdict):
    assert _unlearn(taught, tmp_path / "u", method, lr, steps, *extra) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"verdict: {verdict}: forget 1.000 -> ")
    assert ("obliviate tune --method" in last) == (verdict != "ok")
    res = json.loads((tmp_path / "u" / "results.json").read_text())
    v = res["unlearn_verdict"]
    assert v["verdict"] == verdict and v["line"] == last
    assert v["forget_after"] == res["metrics"][method]["forget_score"]
    card = (tmp_path / "u" / "model" / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["obliviate"]["verdict"] == verdict and "## Verdict" in card


def test_the_api_gives_the_same_verdict(taught, capsys):
    _, info = obliviate.unlearn(taught["model"], taught["tokenizer"], taught["task"], "gradascent", lr=1e-1,
                                steps=2, batch_size=4)
    assert info["verdict"]["verdict"] == "retain lost" and info["before"]["retain_score"] == 1.0
    assert info["verdict"]["line"] in capsys.readouterr().err
    _, info = obliviate.unlearn(taught["model"], taught["tokenizer"], taught["task"], "gradascent", lr=1e-1,
                                steps=2, batch_size=4, judge=False)
    assert "verdict" not in info and "before" not in info
