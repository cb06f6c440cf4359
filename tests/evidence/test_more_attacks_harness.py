import json

import pytest

from obliviate.attacks.cost import counting
from obliviate.attacks.prompts import TYPES, attack_prompts
from obliviate.config import from_dict
from obliviate.errors import ConfigError
from obliviate.evidence.attack_table import in_order
from obliviate.evidence.harness import TaskAttackConfig, attack_names, run_task_attacks
from obliviate.tasks.world import task_from_world

NEW = ["quantize", "ablate", "logit_lens", "in_context", "prompts", "unrelated_finetune", "gcg", "leak_at_k",
       "soft_prompt", "prune", "gcg_prefix"]
OLD_OFF = dict(relearn=False, relearn_disjoint=False, mia=False, probe=False, format_shift=False)


def test_the_new_attacks_are_registered_in_order_and_off_by_default():
    assert list(in_order())[-len(NEW):] == NEW
    cfg = TaskAttackConfig()
    assert not [n for n in NEW if cfg.on(n)]


def test_every_new_attack_runs_in_the_harness_with_its_cost(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    gcg = {"m": 2, "iterations": 1, "topk": 4, "candidates": 4, "max_items": 5}
    cfg = from_dict(TaskAttackConfig, {
        **OLD_OFF, "quantize": {"enabled": True, "schemes": ["int8"]}, "ablate": True, "logit_lens": True,
        "in_context": True, "prompts": True, "unrelated_finetune": {"enabled": True, "steps": 2},
        "gcg": {"enabled": True, **gcg}, "relearn": {"enabled": False, "batch_size": 4}, "lr_grid": [1e-3],
        "lora": False, "leak_at_k": {"enabled": True, "n": 2, "ks": [1, 2]},
        "soft_prompt": {"enabled": True, "m": 2, "steps": 1, "folds": 1, "max_items": 2},
        "prune": {"enabled": True, "fractions": [0.05]}, "gcg_prefix": {"enabled": True, **gcg}, "max_eval": 4})
    check = unchanged(world_model)
    res = run_task_attacks(world_model, world_tokenizer, task, cfg)
    check()
    assert res["attacks_run"] == NEW
    for name in NEW:  # an attack's name is the prefix of its metrics
        assert res[f"{name}_cost"]["forwards"] > 0, name
    assert res["unrelated_finetune_cost"]["backwards"] == 2 and res["unrelated_finetune_lr"] == 1e-3
    assert "ablate_whitebox_forget_score" not in res  # no base model given
    assert res["leak_at_k_budget"]["items"] == 4  # at most max_eval questions
    json.dumps(res)

    # every read records its own item count and variants beside its after-score, and only where that score is
    forget = [x for es in task.evals_by_role("forget", variants=False) for x in es.items]
    types = [t for t in TYPES if f"prompts_{t}_acc" in res]
    best = max(types, key=lambda t: res[f"prompts_{t}_acc"])
    expected = {
        "quantize": (len(forget), 1), "ablate": (len(forget), 1), "prune": (len(forget), 1),  # the whole set
        "logit_lens": (4, 1), "leak_at_k": (4, 1), "unrelated_finetune": (4, 1),  # max_eval of the 12
        "in_context": (4, 2),  # the best of re-introduction and few-shot
        "prompts": (len(attack_prompts(task, forget[:4])[best]), len(types)),
        "gcg": (5, 1), "gcg_prefix": (5, 1),  # their own max_items of half B, not max_eval
        "soft_prompt": (2, 1)}  # one fold, its B cut to 2
    assert len(forget) == 12 and len(task.forget_halves()[1]) == 6 and len(task.forget_folds()[0][2]) == 3
    reads = [r for n in NEW for r in in_order()[n].reads]
    assert {r.name for r in reads if res.get(r.after) is not None} == set(expected)
    for name, (items, variants) in expected.items():
        assert (res[f"{name}_items"], res[f"{name}_variants"]) == (items, variants), name
    assert [r.name for r in reads if res.get(r.after) is None] == ["ablate_whitebox"]  # no base model: read nothing
    assert "ablate_whitebox_items" not in res and "ablate_whitebox_variants" not in res  # so it counts nothing


def test_select_runs_exactly_the_named_attacks_and_an_unknown_name_is_one_line():
    cfg = TaskAttackConfig(select=["quantize,logit_lens"])
    assert {n for n, on in cfg.enabled.items() if on} == {"quantize", "logit_lens"}
    cfg = TaskAttackConfig(select="all")
    assert all(cfg.enabled.values()) and set(cfg.enabled) == set(in_order())
    assert attack_names("ablate, relearn") == ["relearn", "ablate"]  # the harness's order
    with pytest.raises(ConfigError, match=r"^unknown attack 'quantise' \(valid: all, relearn, ") as e:
        TaskAttackConfig(select=["quantize", "quantise"])
    assert "\n" not in str(e.value)


def test_the_harness_records_each_attacks_cost_and_scores_the_base_model_once(taught):
    """One cache shared by two calls (as compare shares it over the models it attacks): the second call makes no
    forward pass on the base model; every attack that ran has its forwards, backwards, tokens and seconds."""
    from obliviate.models import tiny_llama

    task, tok, base = taught["task"], taught["tokenizer"], taught["model"]
    model = tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=1)
    cfg = from_dict(TaskAttackConfig, {**OLD_OFF, "relearn_disjoint": True, "ablate": True, "logit_lens": True,
                                       "relearn": {"enabled": False, "steps": 2, "eval_every": 1, "batch_size": 4},
                                       "lr_grid": [1e-3], "lora": False})
    cache: dict = {}
    seconds: dict = {}
    with counting(base) as first:
        res = run_task_attacks(model, tok, task, cfg, base_model=base, base_cache=cache, timings=seconds)
    assert first.forwards > 0 and res["base_knows_forget"]
    assert set(res["attack_cost"]) == set(res["attacks_run"]) == {"relearn_disjoint", "ablate", "logit_lens"}
    assert set(seconds) == set(res["attacks_run"])  # wall time goes to the caller's timings, not the metrics
    for name, c in res["attack_cost"].items():
        assert c["forwards"] > 0 and c["tokens"] > 0 and seconds[name] >= 0, name
    assert res["attack_cost"]["relearn_disjoint"]["backwards"] == 4 * 2  # three folds and the learning run, 2 steps
    assert res["attack_cost"]["logit_lens"]["backwards"] == 0
    with counting(base) as second:
        again = run_task_attacks(model, tok, task, cfg, base_model=base, base_cache=cache)
    assert second.forwards == 0
    assert again["relearn_disjoint_base_acc"] == res["relearn_disjoint_base_acc"] == 1.0
    assert again["ablate_whitebox_forget_score"] == res["ablate_whitebox_forget_score"]
