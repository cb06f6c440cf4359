"""Relearning on the retain set alone (``relearn_retain``, issue #59): it runs on the tiny world through the
harness with its curve and counts recorded, and every batch it trains on is a retain example, never a forget
one."""

import dataclasses

import pytest

import obliviate.attacks.relearn as relearn
from obliviate.attacks.relearn import RelearnConfig, relearn_attack
from obliviate.attacks.relearn_retain import RetainRelearnConfig
from obliviate.config import from_dict
from obliviate.data import encode_prompt_answer
from obliviate.errors import ConfigError
from obliviate.evidence.attack_table import enabled_in
from obliviate.evidence.harness import TaskAttackConfig, run_task_attacks, skipped_attacks
from obliviate.evidence.verdict import reads
from obliviate.tasks.base import Data
from obliviate.tasks.world import task_from_world


def _cfg(budget: int = 3, **own) -> TaskAttackConfig:
    """The retain-only attack alone, one learning rate, ``budget`` steps of batches of 4; ``own``: its section."""
    return from_dict(TaskAttackConfig, {"select": ["relearn_retain"], "lr_grid": [1e-3], "lora": False,
                                        "max_eval": 6, "relearn": {"steps": budget, "eval_every": 1, "batch_size": 4},
                                        **({"relearn_retain": own} if own else {})})


def test_it_runs_on_the_tiny_world_and_records_its_curve_and_counts(small_world, world_tokenizer, world_model,
                                                                     unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    res = run_task_attacks(world_model, world_tokenizer, task, _cfg())
    check()
    assert res["attacks_run"] == ["relearn_retain"]
    curve = res["relearn_retain_curve"]
    assert [s for s, _ in curve] == [0, 1, 2, 3] and all(0.0 <= v <= 1.0 for _, v in curve)
    assert res["relearn_retain_start_acc"] == curve[0][1] and res["relearn_retain_final_acc"] == curve[-1][1]
    # the forget items it tracks (at most max_eval), read on B at the setting and step chosen on V: no maximum
    assert (res["relearn_retain_items"], res["relearn_retain_variants"]) == (6, 1)
    assert res["relearn_retain_selection"] == "V" and res["relearn_retain_setting"] == ["lr0.001"] * 3
    assert res["relearn_retain_n"] == len(task.retain.qa) and res["relearn_retain_data"] == "qa"
    assert res["relearn_retain_steps"] == 3
    assert res["attack_cost"]["relearn_retain"]["backwards"] == 3  # one setting, 3 steps
    # its own budget, where it sets one
    own = run_task_attacks(world_model, world_tokenizer, task, _cfg(3, steps=2))
    assert [s for s, _ in own["relearn_retain_curve"]] == [0, 1, 2] and own["relearn_retain_steps"] == 2


def _rows(tokenizer, pairs) -> set[tuple[int, ...]]:
    seqs, _ = encode_prompt_answer(tokenizer, [p for p, _ in pairs], [a for _, a in pairs], RelearnConfig().max_len)
    return {tuple(int(t) for t in s) for s in seqs}


@pytest.fixture
def trained_rows(monkeypatch):
    """Every row of every batch the relearning loop computes its loss on, as token ids (padding cut)."""
    rows: list[tuple[int, ...]] = []
    real = relearn.train

    def spy(model, loss_fn, batch_fn, cfg, *a, **k):
        def seen(m, batch, step):
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"]):
                rows.append(tuple(int(t) for t in ids[mask.bool()]))
            return loss_fn(m, batch, step)

        return real(model, seen, batch_fn, cfg, *a, **k)

    monkeypatch.setattr(relearn, "train", spy)
    return rows


def test_every_batch_it_trains_on_is_retain_data_and_none_is_forget_data(small_world, world_tokenizer, world_model,
                                                                           trained_rows):
    task = task_from_world(small_world)
    retain = _rows(world_tokenizer, task.prompt.pairs(list(task.retain.qa), world_tokenizer))
    forget = _rows(world_tokenizer, task.prompt.pairs(list(task.forget.qa), world_tokenizer))
    assert retain and forget and not retain & forget

    # the check can fail: a relearning run on forget facts is caught by it
    relearn_attack(world_model, world_tokenizer, task.prompt.pairs(list(task.forget.qa), world_tokenizer),
                   lambda m: 0.0, RelearnConfig(steps=1, batch_size=4))
    assert trained_rows and set(trained_rows) <= forget
    trained_rows.clear()

    run_task_attacks(world_model, world_tokenizer, task, _cfg(6))
    assert len(trained_rows) == 6 * 4  # 6 steps of batches of 4
    assert set(trained_rows) <= retain and not set(trained_rows) & forget
    assert len(set(trained_rows)) > 4  # it draws from the retain set, not one batch over and over


def test_it_runs_in_compare_not_the_demo_is_read_by_the_verdict_and_needs_retain_data(small_world):
    assert "relearn_retain" in enabled_in("compare") and "relearn_retain" not in enabled_in("demo")
    read = reads()["relearn_retain"]  # calibrated on the controls and read by the verdict like every attack
    assert (read.start, read.after, read.base) == ("relearn_retain_start_acc", "relearn_retain_acc",
                                                   "relearn_retain_base_acc") and read.decides
    task = task_from_world(small_world)
    bare = dataclasses.replace(task, retain=Data())
    assert "relearn_retain" in skipped_attacks(bare, _cfg())
    assert "retain data" in skipped_attacks(bare, _cfg())["relearn_retain"]


@pytest.mark.parametrize("section,key", [({"steps": 0}, "steps"), ({"lr_grid": [0.0]}, "lr_grid")])
def test_a_bad_setting_is_one_line_naming_its_key(section, key):
    with pytest.raises(ConfigError, match=f"^config key 'attacks.relearn_retain.{key}'") as e:
        TaskAttackConfig.from_config({"relearn_retain": section})
    assert "\n" not in str(e.value)
    assert RetainRelearnConfig().steps is None  # default: the relearning section's budget


def test_a_task_whose_retain_set_is_documents_trains_on_them(small_world, world_tokenizer, world_model, trained_rows):
    task = task_from_world(small_world)
    docs = [f"{q} {a}" for q, a in task.retain.qa]  # the retain facts as plain texts, a loss on every token
    res = run_task_attacks(world_model, world_tokenizer, dataclasses.replace(task, retain=Data(docs=docs)), _cfg(2))
    assert (res["relearn_retain_data"], res["relearn_retain_n"]) == ("docs", len(docs))
    bos = world_tokenizer.bos_token_id
    texts = {tuple(([bos] if bos is not None else []) + world_tokenizer(d, add_special_tokens=False)["input_ids"])
             for d in docs}
    assert trained_rows and all(row[:-1] in texts or row in texts for row in trained_rows)  # each + eos, or not
