"""obliviate tune: the grid, the choice under the retain constraint, the validation split, resume, tuned.yaml."""

import dataclasses
import json

import pytest
import yaml

from obliviate.cli.main import main
from obliviate.errors import ConfigError
from obliviate.unlearning.engine import method_run_config
from obliviate.pipelines.tune.run import TuneConfig, choose, grid, keep_shares, meets, tune, validation_split


def _run(method="npo", lr=1e-3, steps=10, alpha=2.0):
    return method_run_config(method, {"train": {"lr": lr, "steps": steps}, "params": {"alpha": alpha}}, "tiny", 0)[0]


def test_grid_is_nearest_first_and_budgeted():
    g = grid(_run(), TuneConfig(space={"lr": [0.5, 1.0, 2.0], "steps": [1.0, 2.0], "alpha": [1.0, 4.0]}, budget=5))
    assert [t["scales"] for t in g] == [[1.0, 1.0, 1.0], [0.5, 1.0, 1.0], [1.0, 2.0, 1.0], [2.0, 1.0, 1.0],
                                        [0.5, 2.0, 1.0]]  # log-distances 0, .69, .69, .69, 1.39
    assert g[1]["lr"] == pytest.approx(5e-4) and g[2]["steps"] == 20 and g[0]["params"] == {"alpha": 2.0}
    one = TuneConfig(space={"lr": [1.0], "steps": [1.0], "alpha": [0.5]})
    assert [t["params"]["alpha"] for t in grid(_run(), one)] == [1.0]
    # gradascent's own space: lr x steps on a 5 x 5 grid, no setting of its own; the budget cuts it
    assert {json.dumps(t["params"]) for t in grid(_run("gradascent"), TuneConfig(budget=30))} == {"{}"}
    assert len(grid(_run("gradascent"), TuneConfig(budget=30))) == 25
    assert len(grid(_run("gradascent"), TuneConfig())) == 24


def _trials(rows):
    """Trials of (forget removed, retain keep, neighbour keep)."""
    return [{"index": i, "forgot": f, "keep": {"retain": r, "neighbour": n}} for i, (f, r, n) in enumerate(rows)]


def test_the_rule_picks_the_lowest_forget_score_that_keeps_retain_and_neighbours():
    t = _trials([(0.3, 1.0, 1.0), (0.9, 0.5, 1.0), (0.7, 0.92, 0.95), (0.7, 0.95, 0.93), (1.0, 0.95, 0.89),
                 (0.8, 1.0, 0.85)])
    best, ok = choose(t, 0.9)
    # 0.9 loses retain, 1.0 and 0.8 lose neighbours; of the two 0.7s, the one whose worst keep is larger (0.93)
    assert ok and best["index"] == 3
    best, ok = choose(t, 0.99)
    assert ok and best["index"] == 0
    # a keep share at the threshold passes; one the task could not measure (None) does not count against it
    best, ok = choose(_trials([(0.2, 1.0, 1.0), (0.6, 0.9, None)]), 0.9)
    assert ok and best["index"] == 1
    assert choose(_trials([(0.5, 0.97, 0.97), (0.5, 0.97, 0.97)]), 0.9)[0]["index"] == 0  # a tie: the earlier


def test_with_no_trial_meeting_the_constraint_the_best_trade_off_is_chosen_and_flagged():
    t = _trials([(1.0, 0.2, 0.9), (0.9, 0.5, 0.8), (0.1, 0.85, 0.7), (0.6, 0.8, 0.86)])
    best, ok = choose(t, 0.9)
    # worst keep shares 0.2, 0.5, 0.7, 0.8: the trial nearest the constraint, not the one that forgot most
    assert not ok and best["index"] == 3
    tie = _trials([(0.2, 0.8, 0.8), (0.5, 0.8, 0.85)])
    assert choose(tie, 0.9) == (tie[1], False)  # equally near: the lower forget score
    assert meets(t[3], 0.8) and not meets(t[3], 0.81)


def test_keep_shares_read_retain_and_neighbour_else_the_utility_score():
    base = {"forget_score": 1.0, "retain_score": 0.8, "neighbour_score": 0.5}
    after = {"forget_score": 0.2, "retain_score": 0.8, "neighbour_score": 0.25}
    assert keep_shares(base, after) == {"retain": 1.0, "neighbour": 0.5}
    assert keep_shares({"retain_score": 0.0}, {"retain_score": 0.1}) == {"retain": None}
    assert keep_shares({"utility_score": 0.5}, {"utility_score": 0.25}) == {"keep": 0.5}
    # a cloze MCQ set's length-normalised score is what the rule reads, as the outcome and the verdict do
    assert keep_shares({"retain_score": 0.5, "retain_score_norm": 1.0},
                       {"retain_score": 0.5, "retain_score_norm": 0.5}) == {"retain": 0.5}


def test_mocked_objective_picks_the_hand_checked_best_and_resumes_after_a_kill(taught, tmp_path):
    val, _ = validation_split(taught["task"], 0.5, 0)
    cfg = TuneConfig(space={"lr": [0.5, 1.0, 2.0], "steps": [1.0], "alpha": [0.5, 1.0, 2.0]}, budget=9)
    run = _run(lr=1e-3, steps=4, alpha=2.0)

    def objective(t):  # forget falls with lr, retain falls with lr and rises with alpha
        a = t["lr"] / 1e-3
        return {"forget_score": max(0.0, 1.0 - 0.4 * a),
                "retain_score": min(1.0, 1.1 - 0.2 * a / (t["params"]["alpha"] / 2))}

    # by hand, lr scale a, alpha scale w: forgot = min(1, 0.4a), retained = min(1, 1.1 - 0.2 a / w) >= 0.9 iff a <= w.
    # Feasible: (0.5, 1), (0.5, 2), (1, 1), (1, 2), (2, 2), (0.5, 0.5); the largest forgot 0.8 is a = 2, w = 2.
    calls = []

    def killed(t):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(t["scales"])
        return objective(t)

    with pytest.raises(KeyboardInterrupt):
        tune(taught["model"], taught["tokenizer"], val, run, cfg, tmp_path / "t", trial_fn=killed, log=lambda s: None)
    assert len(list((tmp_path / "t" / "parts").glob("trial_*.json"))) == 4
    again = []
    r = tune(taught["model"], taught["tokenizer"], val, run, cfg, tmp_path / "t", log=lambda s: None,
             trial_fn=lambda t: again.append(t["scales"]) or objective(t))
    assert len(again) == 5 and not set(map(tuple, again)) & set(map(tuple, calls))  # only the missing trials
    assert r["feasible"] and r["chosen"]["scales"] == [2.0, 1.0, 2.0]
    assert r["chosen"]["forgot"] == pytest.approx(0.8) and r["chosen"]["retained"] == pytest.approx(0.9)
    assert r["settings"]["unlearn"]["train"]["lr"] == pytest.approx(2e-3)
    assert r["settings"]["unlearn"]["params"]["alpha"] == pytest.approx(4.0)
    assert (tmp_path / "t" / "search.png").stat().st_size > 0
    assert "search.png" in (tmp_path / "t" / "report.md").read_text()
    with pytest.raises(ConfigError, match="another config"):  # a store of another run refuses to mix
        tune(taught["model"], taught["tokenizer"], val, _run(lr=3e-3), cfg, tmp_path / "t", trial_fn=objective,
             log=lambda s: None)


def test_validation_split_never_touches_the_reported_items(taught):
    task = taught["task"]
    val, held = validation_split(task, 0.5, 0)
    trained = {q for q, _ in task.forget.qa} | {q for q, _ in task.retain.qa}
    sizes = {es.name: len(es.items) for es in task.evals}
    for es_v, es_h in zip(val.evals, held.evals):
        qv, qh = {x["question"] for x in es_v.items}, {x["question"] for x in es_h.items}
        assert not qv & qh and len(qv) + len(qh) == sizes[es_v.name] and abs(len(qv) - len(qh)) <= 1
        # the held-out share of the retain file (issue #42) is scored, never trained on; every other set is trained
        assert not qv & trained if es_v.name.startswith("retain_heldout") else qv <= trained
    # the trials train on all of it, as the final run does: only the scores are split
    assert val.forget.qa == held.forget.qa == task.forget.qa and val.retain.qa == held.retain.qa == task.retain.qa
    with pytest.raises(ConfigError, match="tune.val_fraction"):
        TuneConfig(val_fraction=1.0)


def _args(taught, out, *extra):
    return ["--out", str(out), "--model", str(taught["dir"]), "--forget", str(taught["forget"]), "--retain",
            str(taught["retain"]), "--method", "npo", "--no-progress", "unlearn.batch_size=4", *extra]


SMALL_GRID = ["unlearn.train.steps=6", "unlearn.train.lr=1e-3", "tune.space.lr=[0.3,1,3]", "tune.space.steps=[1]",
              "tune.space.alpha=[1]"]


def test_tune_writes_settings_that_unlearn_config_reads(taught, tmp_path, capsys):
    assert main(["tune", *_args(taught, tmp_path / "t", *SMALL_GRID)]) == 0
    out = capsys.readouterr().out
    assert "tune npo: chose lr" in out and "obliviate unlearn --method npo --config" in out
    res = json.loads((tmp_path / "t" / "results.json").read_text())
    trials, chosen = res["tune"]["trials"], res["tune"]["chosen"]
    assert len(trials) == 3 and res["tune"]["feasible"]
    feasible = [t for t in trials if t["retained"] >= 0.9]
    assert chosen["forgot"] == max(t["forgot"] for t in feasible)
    tuned = yaml.safe_load((tmp_path / "t" / "tuned.yaml").read_text())
    assert main(["unlearn", "--config", str(tmp_path / "t" / "tuned.yaml"),
                 *_args(taught, tmp_path / "u")[:-1]]) == 0  # batch size from the tuned settings too
    used = json.loads((tmp_path / "u" / "results.json").read_text())["config"]["unlearn"]
    assert used["train"]["lr"] == tuned["unlearn"]["train"]["lr"] == pytest.approx(chosen["lr"])
    assert used["train"]["steps"] == tuned["unlearn"]["train"]["steps"]
    assert used["params"] == tuned["unlearn"]["params"]
    assert used["batch_size"] == 4


def test_unlearn_tune_reports_on_the_held_out_items(taught, tmp_path, capsys):
    assert main(["unlearn", "--tune", *_args(taught, tmp_path / "u", *SMALL_GRID)]) == 0
    res = json.loads((tmp_path / "u" / "results.json").read_text())
    tc = TuneConfig()  # scored on the items validation_split leaves out: half of each trained set was for choosing
    _, held = validation_split(taught["task"], tc.val_fraction, tc.split_seed)
    assert {k: e["n"] for k, e in res["task"]["evals"].items()} == {es.name: len(es.items) for es in held.evals}
    assert res["task"]["evals"]["forget_qa"]["n"] == 4
    assert res["config"]["unlearn"]["train"]["lr"] == pytest.approx(res["tune"]["chosen"]["lr"])
    assert res["config"]["unlearn"]["train"]["steps"] == res["tune"]["chosen"]["steps"]  # the chosen trial's run
    assert res["unlearn_outcome"]["outcome"] in ("ok", "forgot little", "retain lost")
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("outcome: ")


@pytest.mark.parametrize("extra,needle", [(["--method", "snmf"], "edit method"), (["tune.budget=0"], "tune.budget")])
def test_bad_tune_input_is_one_line(taught, tmp_path, capsys, extra, needle):
    args = _args(taught, tmp_path / "t")
    if extra[0] == "--method":
        args[args.index("npo")] = extra[1]
        args.remove("unlearn.batch_size=4")
    else:
        args += extra
    assert main(["tune", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err
    assert not (tmp_path / "t" / "results.json").exists()


def test_compare_tune_runs_each_method_at_its_tuned_settings(taught, tmp_path):
    out = tmp_path / "c"
    rc = main(["compare", "--tune", "--out", str(out), "--no-progress", "--model", str(taught["dir"]), "--forget",
               str(taught["forget"]), "--retain", str(taught["retain"]), "methods=[npo,graddiff]",
               "positive_control=false", "runs.npo.train.steps=6", "runs.npo.train.lr=1e-3", "runs.npo.batch_size=4",
               "runs.graddiff.train.steps=2", "runs.graddiff.batch_size=4", "tuning.space.lr=[0.3,1,3]",
               "tuning.space.steps=[1]", "tuning.space.alpha=[1]", "attacks.relearn.steps=2",
               "attacks.relearn.eval_every=1", "attacks.lr_grid=[1e-3]", "attacks.relearn.lr_grid=[1e-3]",
               "attacks.lora=false"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    for name in ("npo", "graddiff"):
        chosen = res["tuned"][name]["chosen"]
        tried = [json.loads(p.read_text())["key"]["lr"]
                 for p in sorted((out / "tune" / name / "parts").glob("trial_*"))]
        assert len(tried) == 3 and chosen["lr"] in tried
        assert res["method_settings"][name]["lr"] == pytest.approx(chosen["lr"])
        assert res["method_settings"][name]["steps"] == chosen["steps"]
    assert (out / "tune" / "npo" / "report.md").exists()


def test_a_best_trial_that_forgot_little_at_the_grids_edge_pushes_past_it_and_stops_at_the_target(taught, tmp_path):
    val, _ = validation_split(taught["task"], 0.5, 0)
    run = _run(lr=1e-3, steps=4, alpha=2.0)

    def objective(t):  # retain never moves; forget needs lr * steps >= 36e-3 to fall below half (6x the grid's top)
        work = t["lr"] * t["steps"] / 1e-3
        return {"forget_score": 1.0 if work < 36 else 0.2, "retain_score": 1.0}

    seen = []
    cfg = TuneConfig(space={"lr": [1.0, 3.0], "steps": [1.0, 2.0], "alpha": [1.0]}, budget=4, extend=4)
    r = tune(taught["model"], taught["tokenizer"], val, run, cfg, tmp_path / "t", log=lambda s: None,
             trial_fn=lambda t: seen.append(t["scales"]) or objective(t))
    # grid corner (3, 2) is lr*steps = 24e-3: forgot little; one step out (9, 4) is 144e-3 >= 36e-3: done
    assert seen[:4] == [[1.0, 1.0, 1.0], [1.0, 2.0, 1.0], [3.0, 1.0, 1.0], [3.0, 2.0, 1.0]]
    assert seen[4:] == [[9.0, 4.0, 1.0]] and r["chosen"]["scales"] == [9.0, 4.0, 1.0]
    assert r["chosen"]["forgot"] == pytest.approx(0.8) and r["settings"]["unlearn"]["train"]["steps"] == 16
    none = tune(taught["model"], taught["tokenizer"], val, run, dataclasses.replace(cfg, extend=0), tmp_path / "u",
                log=lambda s: None, trial_fn=objective)
    assert len(none["trials"]) == 4 and none["chosen"]["forgot"] == pytest.approx(0.0)  # the grid only
    lost = tune(taught["model"], taught["tokenizer"], val, run, cfg, tmp_path / "v", log=lambda s: None,
                trial_fn=lambda t: {"forget_score": 1.0, "retain_score": 0.5})
    assert len(lost["trials"]) == 4  # nothing feasible: no push past the edge
