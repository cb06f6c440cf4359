import pytest

from obliviate.attacks.finetune_unrelated import unrelated_examples, unrelated_finetune_attack
from obliviate.attacks.relearn import RelearnConfig
from obliviate.errors import ConfigError
from obliviate.tasks.world import task_from_world


def test_the_examples_are_retain_pairs_never_forget_ones(small_world):
    task = task_from_world(small_world)
    ex = unrelated_examples(task, 5, seed=1)
    retain = set(task.prompt.pairs(list(task.retain.qa)))
    assert len(ex) == 5 and set(ex) <= retain
    assert not set(ex) & set(task.prompt.pairs(list(task.forget.qa)))
    assert ex == unrelated_examples(task, 5, seed=1) and ex != unrelated_examples(task, 5, seed=2)
    with pytest.raises(ConfigError, match="config key 'n'"):
        unrelated_examples(task, 0)


def test_the_attack_fine_tunes_a_copy_and_counts_its_passes(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    seen = []
    res = unrelated_finetune_attack(world_model, world_tokenizer, task, lambda m: seen.append(m) or 0.5,
                                    RelearnConfig(steps=4, eval_every=2, batch_size=4), n=6)
    check()
    assert seen and all(m is not world_model for m in seen)
    assert res["unrelated_finetune_n"] == 6 and [s for s, _ in res["unrelated_finetune_curve"]] == [0, 2, 4]
    assert res["unrelated_finetune_acc"] == 0.5
    cost = res["unrelated_finetune_cost"]
    assert cost["backwards"] == 4 and cost["forwards"] >= 4 and cost["tokens"] > 0  # the copy's training steps
