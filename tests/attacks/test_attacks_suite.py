import argparse
import json

import pytest

from obliviate.attacks import FORMATS, RelearnConfig
from obliviate.errors import ConfigError
from obliviate.tasks.world import AttackSuiteConfig, run_attacks

STABLE_KEYS = ["relearn_forget_qa_acc", "relearn_auc", "relearn_steps_to_base", "relearn_curve", "probe_acc",
               "probe_best_layer"] + [f"format_{f}" for f in FORMATS]


def _cfg(**kw):
    return AttackSuiteConfig(relearn=RelearnConfig(steps=4, eval_every=2, batch_size=4), **kw)


def test_run_attacks_returns_the_stable_flat_metrics(small_world, world_tokenizer, world_model, unchanged):
    check = unchanged(world_model)
    res = run_attacks(world_model, world_tokenizer, small_world, base_acc=0.0, cfg=_cfg(relearn_facts=True))
    check()
    assert all(k in res for k in STABLE_KEYS)
    assert [s for s, _ in res["relearn_curve"]] == [0, 2, 4]
    assert [s for s, _ in res["relearn_facts_curve"]] == [0, 2, 4]
    assert res["relearn_steps_to_base"] == 0 and res["relearn_base_acc"] == 0.0  # 0.0 is reached at once
    assert res["probe_best_layer"] in (0, 1)
    for k in STABLE_KEYS:
        if k.startswith(("format_", "probe_acc")) or k in ("relearn_forget_qa_acc", "relearn_auc"):
            assert 0.0 <= res[k] <= 1.0, k
    json.dumps(res)  # plain JSON-able values


def test_run_attacks_measures_the_base_model_on_each_modes_eval_facts(small_world, world_tokenizer, world_model):
    res = run_attacks(world_model, world_tokenizer, small_world, cfg=_cfg(relearn_facts=True), base_model=world_model)
    # the base model is the attacked model here: its accuracy is the step-0 accuracy
    assert res["relearn_base_acc"] == res["relearn_curve"][0][1]
    assert res["relearn_facts_base_acc"] == res["relearn_facts_curve"][0][1]
    assert res["relearn_steps_to_base"] == 0
    no_base = run_attacks(world_model, world_tokenizer, small_world, cfg=_cfg())
    assert no_base["relearn_steps_to_base"] is None and "relearn_facts_curve" not in no_base


def test_suite_config_validation():
    with pytest.raises(ConfigError, match="probe_train_frac"):
        AttackSuiteConfig(probe_train_frac=1.0)


def test_attack_command_writes_results_and_plot(tmp_path, small_world, world_tokenizer, world_model):
    from obliviate.cli.attack import register
    from obliviate.models import save_model, save_tokenizer
    from obliviate.runs.results import read_results

    model_dir = tmp_path / "model"
    save_model(world_model, model_dir)
    save_tokenizer(world_tokenizer, str(model_dir))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    world = [f"world.{k}={getattr(small_world.config, k)}" for k in
             ("n_forget", "n_holdout", "n_retain", "n_general", "n_concept", "n_toxic")]
    args = parser.parse_args(["attack", "--model", str(model_dir), "--base", str(model_dir), "--out",
                              str(tmp_path / "run"), "--no-progress", "attacks.relearn.steps=2",
                              "attacks.relearn.eval_every=1", "attacks.lr_grid=[1e-3]", "attacks.lora=false", *world])
    args.fn(args)
    res = read_results(tmp_path / "run")
    assert res["status"] == "complete" and res["config"]["seed"] == 0 and res["task"]["name"] == "world"
    m = res["metrics"]
    assert [s for s, _ in m["relearn_curve"]] == [0, 1, 2]
    assert [s for s, _ in m["relearn_disjoint_curve"]] == [0, 1, 2]
    assert set(m["attacks_run"]) == {"relearn", "relearn_disjoint", "probe", "mia"}
    # this fixture model never learned the forget facts: nothing to recover, so no steps_to_base
    assert m["base_knows_forget"] is False and m["relearn_steps_to_base"] is None
    assert 0.0 <= m["probe_acc"] <= 1.0
    assert (tmp_path / "run" / "relearn_curve.png").stat().st_size > 1000
