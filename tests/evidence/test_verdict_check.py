"""The verdict's own error rates (issue #57, acceptance 4): the simulation that measures them
(:mod:`obliviate.evidence.verdict_check`), its bounds on a synthetic world comparison, and ``obliviate
verdict-check``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import binom

from obliviate.cli.main import main
from obliviate.errors import DataError
from obliviate.evidence.verdict import reads
from obliviate.evidence.verdict_check import (BOUNDS, JUDGED, Bound, Scenario, bound_result, draw, draw_plan,
                                             interval, scenario_rates, simulate, synthetic_template,
                                             verdict_check)
from obliviate.pipelines.verdict_check import comparison_items, load_template

TRIALS = 200
"""Simulated comparisons per scenario in the small version: a bound is failed when its count lies above what
sampling gives at the bound with probability 1/1000 (:func:`allowed`)."""


def allowed(bound: float, trials: int = TRIALS) -> int:
    """The most hits a rule whose true rate is ``bound`` shows in ``trials`` with probability 0.999 (0 for 0)."""
    return 0 if bound == 0 else int(binom.ppf(0.999, trials, bound))


@pytest.fixture(scope="module")
def world_report():
    """The rule's error rates on a synthetic world comparison (72 items on the demo's reads and counts, the
    oracle at 1/72, three reads calibrated as on the world), :data:`TRIALS` per scenario."""
    return verdict_check(synthetic_template(72), TRIALS, seed=0, items=72, held_grid=(1.0,), power=False)


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: b.name)
def test_the_rule_meets_each_bound_on_the_world(world_report, bound: Bound):
    """Acceptance 4: a truly removed model is never suppressed and rarely inconclusive; a model holding 0.3 under
    one calibrated attack (the worst) or 0.1 under every attack is rarely removed."""
    got = next(b for b in world_report["bounds"] if b["name"] == bound.name)
    assert got["trials"] == TRIALS
    assert got["count"] <= allowed(bound.at_most), (
        f"{got['what']}: {got['count']}/{TRIALS} = {got['share']:.1%} against at most {bound.at_most:.0%} "
        f"(every verdict: {world_report['scenarios'][bound.scenario if bound.scenario != 'one_attack' else 'removed']}"
        ")")


def test_the_one_attack_bound_is_the_worst_calibrated_attack(world_report):
    one = world_report["scenarios"]["one_attack"]
    assert set(one) == {"relearn_disjoint", "logit_lens", "format_shift"}  # the reads calibrated on the template
    got = next(b for b in world_report["bounds"] if b["name"] == "one_attack_false_removed")
    assert got["count"] == max(r["counts"]["removed"] for r in one.values())
    assert got["attack"] in one


def test_a_model_holding_everything_is_suppressed(world_report):
    """The power curve's end: a model at the base model's level under every attack is told from the oracle (the
    simulation can see a held share at all)."""
    (end,) = world_report["scenarios"]["power_curve"]
    assert end["held"] == 1.0
    assert end["counts"]["suppressed"] >= 0.9 * TRIALS
    assert end["counts"]["removed"] == 0


def test_the_same_seed_gives_the_same_shares():
    t = synthetic_template(72)
    a, b = (simulate(t, Scenario(0.1), 25, seed=7, items=72) for _ in range(2))
    assert a == b
    assert sum(a["counts"].values()) == 25
    assert simulate(t, Scenario(0.1), 25, seed=7, items=72, tick=lambda k: None) == a  # a progress bar changes nothing


def test_the_plan_draws_each_number_once_over_its_own_count():
    t = synthetic_template(72, {"logit_lens": (40, 1), "format_shift": (72, 4), "gcg": (32, 1)})
    plan = {key: (p, n, v) for key, p, n, v in draw_plan(t["oracle"], items=50, name="oracle")}
    assert plan["forget_score"] == (pytest.approx(1 / 72), 72, 1)  # the start of several reads, drawn once
    assert [k for k, *_ in draw_plan(t["oracle"], 50)].count("forget_score") == 1
    assert plan["logit_lens_top1"][1:] == (40, 1)
    assert plan["format_shift_acc"][1:] == (72, 4)
    assert plan["gcg_acc"][1:] == (32, 1) and plan["gcg_start_acc"][1:] == (32, 1)  # the start is not a maximum
    assert plan["retain_score"][1:] == (144, 1)
    old = {k: v for k, v in t["oracle"].items() if not k.endswith(("_items", "_variants"))}
    old["logit_lens_top1"] = float("nan")  # missing numbers stay missing: the rule reads them so
    plan = {key: (n, v) for key, p, n, v in draw_plan(old, items=50)}
    assert plan["format_shift_acc"] == (50, 1) and plan["forget_score"] == (50, 1)
    assert "logit_lens_top1" not in plan


def test_a_number_that_is_not_a_share_is_refused():
    t = synthetic_template(72)
    t["positive_control"]["logit_lens_top1"] = 1.7
    with pytest.raises(DataError, match=r"'positive_control'.*logit_lens_top1 = 1.7.*\[0, 1\]"):
        scenario_rates(t, Scenario())


def test_a_maximum_over_variants_is_the_maximum_of_independent_draws():
    """E[max of 4 Binomial(72, 0.1)] / 72 by its tail sum, against the draws' mean (4 standard errors)."""
    n, p, v, trials = 72, 0.1, 4, 20000
    got = draw([("x", p, n, v)], trials, np.random.default_rng(0))["x"]
    expected = sum(1 - binom.cdf(k - 1, n, p) ** v for k in range(1, n + 1)) / n
    assert abs(got.mean() - expected) < 4 * got.std() / math.sqrt(trials)
    assert expected > p + 0.02  # the maximum sits well above one variant's rate
    one = draw([("x", p, n, 1)], trials, np.random.default_rng(1))["x"]
    assert abs(one.mean() - p) < 4 * one.std() / math.sqrt(trials)


def test_a_held_share_lifts_only_the_attacks_named():
    t = synthetic_template(72)
    rates = scenario_rates(t, Scenario(0.3, ("logit_lens",)))
    model, oracle, base = rates[JUDGED], t["oracle"], t["base"]
    assert model["logit_lens_top1"] == pytest.approx(1 / 72 + 0.3 * (0.95 - 1 / 72))
    for key in ("format_shift_acc", "relearn_disjoint_acc", "forget_score"):
        assert model[key] == oracle[key]
    assert (model["retain_score"], model["neighbour_score"]) == (base["retain_score"], base["neighbour_score"])
    every = scenario_rates(t, Scenario(0.1))[JUDGED]
    assert all(every[reads()[k].after] > oracle[reads()[k].after] for k in ("format_shift", "relearn_disjoint"))
    removed = scenario_rates(t, Scenario())[JUDGED]
    assert all(removed[reads()[k].after] == oracle[reads()[k].after] for k in ("format_shift", "quantize"))
    with pytest.raises(ValueError, match="held"):
        Scenario(1.5)
    with pytest.raises(ValueError, match="unknown read 'nosuch'"):
        Scenario(0.3, ("nosuch",))


def test_interval_is_clopper_pearson():
    """At 0 of n the exact upper end is 1 - 0.025^(1/n); the interval of n - k mirrors that of k."""
    assert interval(0, 400)[0] == 0 and interval(0, 400)[1] == pytest.approx(1 - 0.025 ** (1 / 400))
    assert interval(400, 400) == (pytest.approx(0.025 ** (1 / 400)), 1.0)
    lo, hi = interval(7, 200)
    assert (1 - hi, 1 - lo) == pytest.approx(interval(193, 200))


@pytest.mark.parametrize("count,trials,at_most,status", [
    (0, 400, 0.01, "pass"),  # the upper end, 0.92%, is within 1%
    (0, 300, 0.01, "unresolved"),  # 1.22%: 300 trials cannot show 1%
    (20, 100, 0.05, "fail"),  # the lower end, 12.7%, is above 5%
    (0, 10, 0.0, "pass"),
    (1, 1000, 0.0, "fail"),
])
def test_each_bound_is_passed_only_by_its_interval(count, trials, at_most, status):
    result = {"counts": {"removed": count}, "trials": trials}
    assert bound_result(Bound("b", "x", "removed", at_most, "b"), result)["status"] == status


def test_comparison_items_of_old_and_new_results():
    assert comparison_items({"config": {"attacks": {"max_eval": 40}}}, {"base": {"forget_items": 72}}) == 40
    assert comparison_items({}, {"base": {"forget_items": 72}}) == 72
    old = {"robustness": {"band": {"relearn": {"items": 50}, "quantize": {"items": 50}}}}
    assert comparison_items(old, {"base": {}}) == 50
    assert comparison_items({}, {"base": {}}) is None


def _results(tmp_path, metrics=None, **extra):
    path = tmp_path / "in" / "results.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"status": "complete", "metrics": synthetic_template(72) if metrics is None
                                else metrics, **extra}))
    return path


def test_verdict_check_writes_its_files_and_prints_the_table(tmp_path, capsys):
    results, out = _results(tmp_path), tmp_path / "check"
    assert main(["verdict-check", "--results", str(results), "--out", str(out), "--trials", "3", "--seed", "4"]) == 0
    captured = capsys.readouterr()
    assert "| check | bound | simulated | 95% interval | result |" in captured.out
    assert "truly removed: false inconclusive" in captured.out
    assert "\r" not in captured.err  # no progress bar off a terminal
    assert all(line.startswith("obliviate: ") for line in captured.err.splitlines())
    report = json.loads((out / "verdict_check.json").read_text())
    assert [b["name"] for b in report["bounds"]] == [b.name for b in BOUNDS]
    assert (out / "verdict_check.md").read_text().count("| check | bound |") == 1
    assert (out / "power.png").read_bytes()[:4] == b"\x89PNG"
    done = json.loads((out / "results.json").read_text())
    assert done["status"] == "complete" and done["inputs"][0]["path"] == str(results.resolve())
    again = tmp_path / "again"
    assert main(["verdict-check", "--results", str(results.parent), "--out", str(again), "--trials", "3",
                 "--seed", "4"]) == 0
    assert json.loads((again / "verdict_check.json").read_text())["scenarios"] == report["scenarios"]


def _bad_files(tmp_path):
    t = synthetic_template(72)
    no_control = {k: v for k, v in t.items() if k in ("base", "oracle")}
    return {
        "missing": (tmp_path / "nosuch.json", "results file not found"),
        "not JSON": (_write(tmp_path, "a.json", '{"metrics": '), "is not JSON"),
        "a list": (_write(tmp_path, "b.json", "[1, 2]"), "not a results.json"),
        "invalid run": (_write(tmp_path, "c.json", json.dumps({"status": "invalid", "error": "NaN logits"})),
                        "did not finish.*NaN logits"),
        "no oracle": (_write(tmp_path, "d.json", json.dumps({"metrics": {"base": t["base"]}})),
                      "no base model and oracle"),
        "attack without --base": (_write(tmp_path, "e.json", json.dumps({"metrics": {"negative_control": {}}})),
                                  "without --base"),
        "no positive control": (_write(tmp_path, "f.json", json.dumps({"metrics": no_control})),
                                "no positive control"),
        "not a share": (_write(tmp_path, "g.json", json.dumps({"metrics": {**t, "oracle": {**t["oracle"],
                                                                                          "forget_score": 3}}})),
                        r"'oracle'.*forget_score = 3"),
    }


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("case", ["missing", "not JSON", "a list", "invalid run", "no oracle",
                                  "attack without --base", "no positive control", "not a share"])
def test_a_bad_results_file_is_one_line_before_any_work(tmp_path, capsys, case):
    path, needle = _bad_files(tmp_path)[case]
    out = tmp_path / "out"
    assert main(["verdict-check", "--results", str(path), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("obliviate: error: results file")
    assert str(path) in lines[0]
    import re
    assert re.search(needle, lines[0]), lines[0]
    assert captured.out == "" and not out.exists()


def test_an_attack_run_with_base_is_a_template(tmp_path):
    t = synthetic_template(72)
    path = _results(tmp_path, {"negative_control": t["oracle"], "forget_score": 0.01},
                    reference_metrics={k: v for k, v in t.items() if k != "oracle"})
    got = load_template(str(path))
    assert got.kind == "attack" and got.metrics["oracle"] == t["oracle"] and got.items == 72


def test_out_may_not_hold_the_results_file(tmp_path, capsys):
    results = _results(tmp_path)
    assert main(["verdict-check", "--results", str(results), "--out", str(results.parent)]) == 2
    assert "overlaps the input file" in capsys.readouterr().err
