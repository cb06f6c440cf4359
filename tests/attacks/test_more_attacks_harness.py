import json

from obliviate.attacks.harness import ATTACKS, TaskAttackConfig, run_task_attacks
from obliviate.attacks.gcg import GCGConfig
from obliviate.attacks.relearn import RelearnConfig
from obliviate.tasks.world import task_from_world

NEW = ["quantize", "ablate", "logit_lens", "in_context", "prompts", "unrelated_finetune", "gcg"]
OLD_OFF = dict(corpus=False, disjoint=False, mia=False, probe=False, format_shift=False)


def test_the_new_attacks_are_registered_in_order_and_off_by_default():
    assert list(ATTACKS)[-len(NEW):] == NEW
    cfg = TaskAttackConfig()
    assert not [n for n in NEW if getattr(cfg, ATTACKS[n].enabled)]


def test_every_new_attack_runs_in_the_harness_with_its_cost(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    cfg = TaskAttackConfig(**OLD_OFF, quantize=True, ablate=True, logit_lens=True, in_context=True, prompts=True, unrelated_finetune=True, unrelated_steps=2, gcg=True,
                           gcg_config=GCGConfig(m=2, iterations=1, topk=4, candidates=4), quantize_schemes=["int8"],
                           relearn=RelearnConfig(batch_size=4), lr_grid=[1e-3], lora=False)
    check = unchanged(world_model)
    res = run_task_attacks(world_model, world_tokenizer, task, cfg)
    check()
    assert res["attacks_run"] == NEW
    for cost in ("quantize", "ablate", "logit_lens", "in_context", "prompt", "unrelated_ft", "gcg"):
        assert res[f"{cost}_cost"]["forwards"] > 0, cost
    assert res["unrelated_ft_cost"]["backwards"] == 2 and res["unrelated_ft_lr"] == 1e-3
    assert "ablate_whitebox_forget_score" not in res  # no base model given
    json.dumps(res)
