"""The world's value probe sets (obliviate.tasks.world.value_probe_sets)."""

import pytest

from obliviate.data import qa_answer, qa_prompt
from obliviate.tasks.world import task_from_world, value_prefix, value_probe_sets
from obliviate.world import WorldConfig, generate_world


@pytest.mark.parametrize("seed", [0, 5])
def test_value_probe_items_stop_just_before_the_value(seed):
    world = generate_world(WorldConfig(seed=seed))
    items, extra = value_probe_sets(world)
    facts = {f["id"]: f for f in world.facts}
    assert len(items) == len(world.mcqs(split="forget"))
    for m in items:
        f = facts[m["fact_id"]]
        full = qa_prompt(f["question"]) + qa_answer(f["answer"])
        assert full.startswith(m["prefix"]) and f["value"] not in m["prefix"][len(qa_prompt(f["question"])):]
        assert full[len(m["prefix"]):].startswith(" " + f["value"])
        assert m["choices"][m["answer_index"]] == m["value"] == f["value"]


def test_extra_training_facts_are_kept_facts_that_share_the_forget_values():
    world = generate_world(WorldConfig(seed=1))
    items, extra = value_probe_sets(world)
    options = {c for m in items for c in m["choices"]}
    kept = {value_prefix(f): f for f in world.facts if f["split"] not in ("forget", "holdout")}
    assert extra and all(e["prefix"] in kept and e["value"] in options for e in extra)
    forget_prefixes = {m["prefix"] for m in items}
    assert not forget_prefixes & {e["prefix"] for e in extra}
    # the look-alike diseases carry the forget relations' values, so every one of them is there
    lookalikes = [f for f in world.facts_by_split("neighbour") if f.get("neighbour") == "lookalike"]
    assert {value_prefix(f) for f in lookalikes} <= {e["prefix"] for e in extra}


def test_the_world_task_carries_the_value_probe_data():
    world = generate_world(WorldConfig(seed=2))
    items, extra = value_probe_sets(world)
    task = task_from_world(world)
    assert task.probe == {"items": items, "extra": extra}
    cut = task_from_world(world, limit=2)  # only the MCQs of the forget facts kept
    kept = {f[1] for f in cut.forget.qa}
    assert cut.probe["items"] and all(m["fact_id"].startswith("forget") for m in cut.probe["items"])
    assert len({m["fact_id"] for m in cut.probe["items"]}) <= 2 and kept
