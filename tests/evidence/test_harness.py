import argparse
import json

import pytest

import obliviate.attacks.relearn as relearn
import obliviate.attacks.relearn_disjoint as disjoint
from obliviate.config import from_dict
from obliviate.errors import ConfigError
from obliviate.eval.suite import evaluate_task
from obliviate.evidence.harness import TaskAttackConfig, run_task_attacks
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
    # each read's counts: relearn reads B of each fold, every one of the 12 forget items twice over the 3 folds (a
    # mean over the 12 with equal weights); the disjoint folds' B hold 3, 6 and 3 facts, averaged as 3 fold means:
    # variance p(1 - p)(1/3 + 1/6 + 1/3) / 9, the binomial variance of 10.8 items, so 10 (rounded down)
    assert (res["relearn_items"], res["relearn_variants"]) == (12, 1)
    assert [len(b) for _, _, b in task.forget_folds()] == [3, 6, 3]
    assert (res["relearn_disjoint_items"], res["relearn_disjoint_variants"]) == (10, 1)
    sizes = {es.name: len(es.items) for es in task.evals if es.variant and es.role == "forget"}
    assert (res["format_shift_items"], res["format_shift_variants"]) == (sizes[res["format_shift_set"]], 4)
    assert not any(k.startswith(("probe_", "mia_")) and k.endswith(("_items", "_variants")) for k in res)  # no read


@pytest.mark.parametrize("max_eval,relearn_counts,disjoint_items", [(5, (5, 1), 10), (2, (2, 5), 6)])
def test_the_relearning_reads_count_the_items_they_score(small_world, world_tokenizer, world_model, max_eval,
                                                         relearn_counts, disjoint_items):
    """max_eval 5: relearn's 3 folds over 5 items, B chosen on V (one read, no maximum); the disjoint B of 3, 5 (of
    6) and 3 facts count 9 / (1/3 + 1/5 + 1/3) = 10.4, so 10. max_eval 2: too few items for V, so relearn_acc is the
    best of the 5 distinct models on the same 2 items (the untrained one, and 2 settings x reads at steps 2 and 4);
    the disjoint B are 2, 2 and 2 facts, 6."""
    task = task_from_world(small_world)
    cfg = _cfg(mia=False, probe=False, format_shift=False, relearn_disjoint={"learning": False}, max_eval=max_eval,
               lr_grid=[1e-3, 3e-3])
    res = run_task_attacks(world_model, world_tokenizer, task, cfg)
    assert res["relearn_selection"] == ("V" if max_eval >= 3 else "optimistic")
    assert [s for s, _ in res["relearn_curve"]] == [0, 2, 4]
    assert (res["relearn_items"], res["relearn_variants"]) == relearn_counts
    assert (res["relearn_disjoint_items"], res["relearn_disjoint_variants"]) == (disjoint_items, 1)


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
