import argparse
import json

import pytest

import obliviate.attacks.relearn as relearn
import obliviate.attacks.relearn_disjoint as disjoint
from obliviate.attacks.harness import TaskAttackConfig, run_task_attacks
from obliviate.config import from_dict
from obliviate.errors import ConfigError
from obliviate.eval.suite import evaluate_task
from obliviate.tasks.world import task_from_world

STABLE_KEYS = ["relearn_acc", "relearn_auc", "relearn_steps_to_base", "relearn_curve", "relearn_disjoint_acc",
               "probe_acc", "probe_best_layer", "format_shift_acc", "format_shift_set", "mia_auc_loss"]


def _cfg(**kw):
    relearn = {"steps": 4, "eval_every": 2, "batch_size": 4, **kw.pop("relearn", {})}
    return from_dict(TaskAttackConfig, {"relearn": relearn, "lr_grid": [1e-3], "lora": False, **kw})


def test_the_world_runs_the_one_suite_with_stable_flat_metrics(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    res = run_task_attacks(world_model, world_tokenizer, task, _cfg(), base_score=0.0)
    check()
    assert all(k in res for k in STABLE_KEYS)
    assert set(res["attacks_run"]) == {"relearn", "relearn_disjoint", "mia", "probe", "format_shift"}
    assert [s for s, _ in res["relearn_curve"]] == [0, 2, 4]
    assert res["probe_best_layer"] in (0, 1)
    assert res["format_shift_set"] in {es.name for es in task.evals if es.variant}
    for k in ("relearn_acc", "relearn_auc", "probe_acc", "format_shift_acc"):
        assert 0.0 <= res[k] <= 1.0, k
    json.dumps(res)  # plain JSON-able values


def test_format_shift_reads_the_models_own_evaluation(small_world, world_tokenizer, world_model, monkeypatch):
    """With the evaluation given, the variant sets are not scored again, and the attack is their best score."""
    task = task_from_world(small_world)
    m = evaluate_task(world_model, world_tokenizer, task)
    variants = [es for es in task.evals if es.variant]
    raw = {es.name: m[f"{es.name}_{'em' if es.kind == 'qa' else 'acc'}"] for es in variants}
    # each above its chance: clip((score - chance) / (1 - chance), 0, 1), chance 0 for QA, 1/4 for the MCQs
    scores = {es.name: min(1.0, max(0.0, (raw[es.name] - es.chance) / (1 - es.chance))) for es in variants}
    monkeypatch.setattr("obliviate.attacks.format_shift.evaluate_set",
                        lambda *a, **k: pytest.fail("a variant set was scored twice"))
    cfg = _cfg(relearn={"enabled": False}, relearn_disjoint=False, mia=False, probe=False)
    res = run_task_attacks(world_model, world_tokenizer, task, cfg, metrics=m)
    assert res["attacks_run"] == ["format_shift"]
    assert res["format_shift_acc"] == max(scores.values()) and scores[res["format_shift_set"]] == max(scores.values())


def test_the_corpus_attack_has_its_own_learning_rates(small_world, world_tokenizer, world_model, monkeypatch):
    task = task_from_world(small_world)
    seen = []
    real = relearn.relearn_attack

    def spy(model, tok, data, fn, rc, **kw):
        seen.append((isinstance(data[0], str), rc.lr))
        return real(model, tok, data, fn, rc, **kw)

    monkeypatch.setattr(relearn, "relearn_attack", spy)
    monkeypatch.setattr(disjoint, "relearn_attack", spy)
    run_task_attacks(world_model, world_tokenizer, task, _cfg(relearn={"lr_grid": [3e-3]}, mia=False, probe=False,
                                                              format_shift=False))
    # corpus once; each A/V/B fold once; the learning run on fold 0's B facts once
    assert sorted(seen) == sorted([(True, 3e-3)] + [(False, 1e-3)] * 4)


def test_suite_config_validation():
    with pytest.raises(ConfigError, match=r"^config key 'attacks.probe.train_frac': must be in \(0, 1\)"):
        from_dict(TaskAttackConfig, {"probe": {"train_frac": 1.0}}, "attacks")
    with pytest.raises(ConfigError, match=r"^config key 'attacks.relearn.lr_grid': needs finite"):
        from_dict(TaskAttackConfig, {"relearn": {"lr_grid": [0.0]}}, "attacks")
    with pytest.raises(ConfigError, match=r"^unknown config key 'attacks.corpus' \(known: .*relearn"):
        from_dict(TaskAttackConfig, {"corpus": False}, "attacks")
    with pytest.raises(ConfigError, match=r"^config key 'attacks.format_shift': attack 'format_shift' has no settings"):
        from_dict(TaskAttackConfig, {"format_shift": {"k": 1}}, "attacks")


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
    assert set(m["attacks_run"]) == {"relearn", "relearn_disjoint", "probe", "mia", "format_shift"}
    # this fixture model never learned the forget facts: nothing to recover, so no steps_to_base
    assert m["base_knows_forget"] is False and m["relearn_steps_to_base"] is None
    assert 0.0 <= m["probe_acc"] <= 1.0
    assert (tmp_path / "run" / "relearn_curve.png").stat().st_size > 1000
