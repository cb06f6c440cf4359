"""The settings tuned for each method on the world, committed beside the methods, and compare --tuned."""

import json

import pytest
import yaml

from obliviate.cli.main import main
from obliviate.errors import ConfigError
from obliviate.methods import METHODS, method_names
from obliviate.pipelines.compare.run import compare_settings, method_config
from obliviate.pipelines.tune.committed import (TUNED_DIR, read_method_tuning, tuned_path, tuned_run,
                                                write_method_tuning)
from obliviate.pipelines.tune.run import meets
from obliviate.unlearning.engine import method_run_config


def _result(method="npo", lr=2e-3, steps=3, alpha=5.0, feasible=True):
    """A tuning result as tune returns it (the parts the committed file reads)."""
    chosen = {"index": 4, "lr": lr, "steps": steps, "params": {"alpha": alpha}, "scales": [2.0, 0.5, 0.5],
              "forgot": 0.75, "keep": {"retain": 0.95, "neighbour": 0.91}, "forget_score": 0.25,
              "retain_score": 0.95, "neighbour_score": 0.91}
    return {"method": method, "chosen": chosen, "feasible": feasible, "trials": [chosen] * 6, "budget": 6,
            "retain_share": 0.9, "space": {"lr": [1.0, 2.0], "steps": [0.5, 1.0], "alpha": [0.5, 1.0]},
            "settings": {"unlearn": {"method": method, "params": {"alpha": alpha}, "batch_size": 4,
                                     "train": {"lr": lr, "steps": steps}}}}


COMMITTED = sorted(p.stem for p in TUNED_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", COMMITTED)
def test_each_committed_file_is_a_valid_run_of_a_registered_method_chosen_by_the_rule(name):
    assert name in method_names() and METHODS[name].kind == "train"
    doc = read_method_tuning(name)
    for_ = doc["tuned_for"]
    assert for_["task"] == "world" and for_["preset"] == "tiny" and for_["trials"] == for_["budget"]
    assert set(for_["space"]) == set(METHODS[name].search) | {"lr", "steps"}  # the method's documented space
    method_run_config(name, doc["unlearn"], "tiny", 0)  # the settings are a run the method accepts
    # the flag it carries is what the rule says of the chosen trial's keep shares
    assert doc["choice"]["meets_constraint"] == meets({"keep": doc["choice"]["keep"]}, for_["retain_share"])


def test_the_committed_file_round_trips_and_a_bad_one_is_one_line(tmp_path):
    path = write_method_tuning("npo", _result(), {"task": "world", "seed": 0, "preset": "tiny", "base": "x"},
                               tmp_path)
    assert path == tuned_path("npo", tmp_path) and path.read_text().startswith("# npo: tuned by")
    doc = read_method_tuning("npo", tmp_path)
    assert doc["unlearn"] == {"params": {"alpha": 5.0}, "batch_size": 4, "train": {"lr": 2e-3, "steps": 3}}
    assert doc["choice"]["meets_constraint"] and doc["choice"]["scales"] == {"lr": 2.0, "steps": 0.5, "alpha": 0.5}
    assert read_method_tuning("rmu", tmp_path) is None
    # the user's runs.<name> wins key by key; another preset's file is not used, and the source says why
    run, src = tuned_run("npo", "tiny", {"train": {"steps": 7}, "params": {"beta": 0.2}}, tmp_path)
    assert run == {"params": {"alpha": 5.0, "beta": 0.2}, "batch_size": 4, "train": {"lr": 2e-3, "steps": 7}}
    assert src["from"] == str(path) and src["choice"]["trial"] == 5
    run, src = tuned_run("npo", "paper", None, tmp_path)
    assert run == {} and src["from"] == "preset" and "'tiny' preset" in src["why"]
    assert tuned_run("rmu", "tiny", None, tmp_path)[1] == {"from": "preset", "why": "no tuned settings (rmu.yaml)"}
    (tmp_path / "rmu.yaml").write_text("unlearn: {lr: 1}\n")
    with pytest.raises(ConfigError, match="rmu.yaml: not a tuned-settings file") as e:
        read_method_tuning("rmu", tmp_path)
    assert "\n" not in str(e.value)
    (tmp_path / "rmu.yaml").write_text("unlearn: [\n")
    with pytest.raises(ConfigError, match="not readable as YAML"):
        read_method_tuning("rmu", tmp_path)


def test_compare_tuned_takes_the_committed_settings_and_tune_with_tuned_is_refused():
    cfg = compare_settings(0, tuned=True, methods="npo,graddiff", overrides=["runs.graddiff.train.lr=7e-4"])
    for name in ("npo", "graddiff"):
        doc = read_method_tuning(name)
        ucfg = method_config(cfg, name, "tiny")[0]
        want = method_run_config(name, doc and doc["unlearn"], "tiny", 0)[0]  # no file: the preset
        assert (ucfg.train.steps, ucfg.params, ucfg.batch_size) == (want.train.steps, want.params, want.batch_size)
        assert ucfg.train.lr == (7e-4 if name == "graddiff" else want.train.lr)  # runs.<name> wins
    with pytest.raises(ConfigError, match="--tune and --tuned"):
        compare_settings(0, tune=True, tuned=True)


@pytest.mark.slow  # about 20 s alone: a whole comparison (oracle, attacks) on the taught model
def test_compare_tuned_runs_each_method_at_its_file_and_says_which_had_none(taught, tmp_path):
    tuned = tmp_path / "tuned"
    write_method_tuning("npo", _result(lr=2e-3, steps=3, alpha=5.0),
                        {"task": "world", "seed": 0, "preset": "tiny", "base": "x"}, tuned)
    out = tmp_path / "c"
    rc = main(["compare", "--tuned", "--out", str(out), "--no-progress", "--model", str(taught["dir"]), "--forget",
               str(taught["forget"]), "--retain", str(taught["retain"]), "methods=[npo,graddiff]",
               f"tuned_dir={tuned}", "positive_control=false", "runs.graddiff.train.steps=2",
               "runs.graddiff.batch_size=4", "attacks.relearn.steps=2", "attacks.relearn.eval_every=1",
               "attacks.lr_grid=[1e-3]", "attacks.relearn.lr_grid=[1e-3]", "attacks.lora=false"])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    s = res["method_settings"]["npo"]
    assert (s["lr"], s["steps"], s["batch_size"], s["params"]["alpha"]) == (2e-3, 3, 4, 5.0)
    assert res["tuned"]["npo"]["from"] == str(tuned / "npo.yaml") and res["tuned"]["npo"]["choice"]["trial"] == 5
    assert res["tuned"]["graddiff"]["from"] == "preset" and res["method_settings"]["graddiff"]["steps"] == 2
    assert yaml.safe_load((tuned / "npo.yaml").read_text())["unlearn"]["train"]["steps"] == 3  # read, not changed
