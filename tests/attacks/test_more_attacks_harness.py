import json

import pytest

from obliviate.attacks.cost import counting, resumable_cost_hooks
from obliviate.attacks.gcg import GCGConfig
from obliviate.attacks.leak_at_k import LeakConfig
from obliviate.attacks.pruning import PruneConfig
from obliviate.attacks.soft_prompt import SoftPromptConfig
from obliviate.attacks.harness import ATTACKS, TaskAttackConfig, attack_names, run_task_attacks
from obliviate.errors import ConfigError
from obliviate.attacks.relearn import RelearnConfig
from obliviate.tasks.world import task_from_world

NEW = ["quantize", "ablate", "logit_lens", "in_context", "prompts", "unrelated_finetune", "gcg", "leak_at_k",
       "soft_prompt", "prune", "gcg_prefix"]
OLD_OFF = dict(corpus=False, disjoint=False, mia=False, probe=False, format_shift=False)


def test_the_new_attacks_are_registered_in_order_and_off_by_default():
    assert list(ATTACKS)[-len(NEW):] == NEW
    cfg = TaskAttackConfig()
    assert not [n for n in NEW if getattr(cfg, ATTACKS[n].enabled)]


def test_every_new_attack_runs_in_the_harness_with_its_cost(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    cfg = TaskAttackConfig(**OLD_OFF, quantize=True, ablate=True, logit_lens=True, in_context=True, prompts=True, unrelated_finetune=True, unrelated_steps=2, gcg=True,
                           gcg_config=GCGConfig(m=2, iterations=1, topk=4, candidates=4), quantize_schemes=["int8"],
                           relearn=RelearnConfig(batch_size=4), lr_grid=[1e-3], lora=False, leak_at_k=True,
                           leak_config=LeakConfig(n=2, ks=[1, 2]), soft_prompt=True,
                           soft_prompt_config=SoftPromptConfig(m=2, steps=1, folds=1), prune=True,
                           prune_config=PruneConfig(fractions=[0.05]), gcg_prefix=True, max_eval=4)
    check = unchanged(world_model)
    res = run_task_attacks(world_model, world_tokenizer, task, cfg)
    check()
    assert res["attacks_run"] == NEW
    for cost in ("quantize", "ablate", "logit_lens", "in_context", "prompt", "unrelated_ft", "gcg", "leak_at_k",
                 "soft_prompt", "prune", "gcg_prefix"):
        assert res[f"{cost}_cost"]["forwards"] > 0, cost
    assert res["unrelated_ft_cost"]["backwards"] == 2 and res["unrelated_ft_lr"] == 1e-3
    assert "ablate_whitebox_forget_score" not in res  # no base model given
    assert res["leak_at_k_budget"]["items"] == 4  # at most max_eval questions
    json.dumps(res)


def test_select_runs_exactly_the_named_attacks_and_an_unknown_name_is_one_line():
    cfg = TaskAttackConfig(select=["quantize,logit_lens"])
    on = {n for n, a in ATTACKS.items() if getattr(cfg, a.enabled)}
    assert on == {"quantize", "logit_lens"}
    cfg = TaskAttackConfig(select="all")
    assert all(getattr(cfg, a.enabled) for a in ATTACKS.values())
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
    cfg = TaskAttackConfig(**{**OLD_OFF, "disjoint": True}, ablate=True, logit_lens=True, relearn=RelearnConfig(
        steps=2, eval_every=1, batch_size=4), lr_grid=[1e-3], lora=False)
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


def test_a_resumed_attack_counts_what_it_spent_before_its_checkpoint():
    """The relearning loop saves each open counter's growth with its checkpoints and adds it back on resume."""
    with counting() as first:
        first.forwards += 3  # spent before the attack began: not the attack's
        get, _ = resumable_cost_hooks()
        first.forwards += 5
        first.backwards += 2
        saved = get()  # what a checkpoint keeps
    assert saved == {"attack_cost": [{"forwards": 5, "backwards": 2, "tokens": 0}]}
    with counting() as resumed:
        _, put = resumable_cost_hooks()
        put(saved)
        resumed.forwards += 1  # the steps after the checkpoint
    assert (resumed.forwards, resumed.backwards) == (6, 2)
