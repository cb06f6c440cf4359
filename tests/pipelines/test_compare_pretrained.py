"""``CompareConfig.pretrained``: more models pretrained beside the base model (SGTM, filtering under label
noise), judged as methods; their settings are checked before any model."""

import pytest

from obliviate.errors import ConfigError
from obliviate.pipelines.compare.run import CompareConfig, compare_plan, pretrained_variant
from obliviate.tasks.world import WorldConfig
from obliviate.train.pretrain import PretrainConfig


def test_a_pretrained_variant_is_the_pretraining_with_its_settings_changed():
    base = PretrainConfig(seed=3, mask_splits=[])
    v = pretrained_variant(base, "sgtm_noise10", {"route_splits": ["forget"], "label_noise": 0.1,
                                                  "sgtm": {"mlp_units": 32}})
    assert (v.seed, v.route_splits, v.label_noise, v.sgtm.mlp_units, v.sgtm.heads) == (3, ["forget"], 0.1, 32, 1)
    assert v.world == base.world and v.train == base.train


@pytest.mark.parametrize("name, settings, match", [
    ("npo", {}, "not a free model name"), ("filtered", {}, "not a free model name"),
    ("oracle", {}, "not a free model name"), ("a/b", {}, "not a free model name"),
    ("x", ["forget"], "must be a mapping"), ("x", {"route_split": ["forget"]}, "pretrained.x.*route_split"),
    ("x", {"mask_splits": ["forget"], "label_noise": 3}, "pretrained.x.*label_noise"),
])
def test_a_bad_pretrained_model_is_one_error(name, settings, match):
    with pytest.raises(ConfigError, match=match):
        pretrained_variant(PretrainConfig(), name, settings)


def test_the_check_before_any_model_reads_them(tmp_path):
    from obliviate.tasks.world import world_task

    task = world_task(world=WorldConfig(seed=0, n_forget=3, n_holdout=1, n_retain=3, n_general=3, n_concept=2,
                                        n_toxic=4))
    bad = CompareConfig(methods=[], pretrained={"sgtm": {"route_splits": ["forgot"]}})
    with pytest.raises(ConfigError, match="pretrained.sgtm"):
        compare_plan(bad, task)
    with pytest.raises(ConfigError, match="need a task with a world and no --model"):
        compare_plan(CompareConfig(methods=[], pretrained={"sgtm": {"route_splits": ["forget"]}}), task,
                             model=str(tmp_path))
