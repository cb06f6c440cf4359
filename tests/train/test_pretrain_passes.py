"""A pretraining's recorded passes (``pretrain.json``'s ``passes``, what compare's cost shares divide by) are those of
the whole run, a run killed after a checkpoint and resumed included (issue #59)."""

import pytest

import obliviate.train.loop as loop
from obliviate.train.pretrain import ModelConfig, PretrainConfig, TrainConfig, pretrain
from obliviate.world import WorldConfig

WORLD = WorldConfig(seed=0, n_forget=2, n_holdout=1, n_retain=2, n_general=2, n_concept=2, n_toxic=4)


def test_a_resumed_pretraining_records_the_passes_of_the_whole_run(tmp_path, monkeypatch):
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path / "cache"))
    cfg = PretrainConfig(world=WORLD, model=ModelConfig(size="nano", vocab_size=400), batch_size=2, qa_batch_size=8,
                         train=TrainConfig(steps=4, lr=1e-3, log_every=1, progress=False, checkpoint_every=2))
    full = pretrain(cfg, tmp_path / "full", resume=False, progress=False)["info"]

    class Stop(Exception):
        pass

    real_save = loop.save_checkpoint

    def save_then_stop(*a, **kw):
        real_save(*a, **kw)
        raise Stop

    monkeypatch.setattr(loop, "save_checkpoint", save_then_stop)
    with pytest.raises(Stop):
        pretrain(cfg, tmp_path / "run", resume=False, progress=False)
    monkeypatch.setattr(loop, "save_checkpoint", real_save)
    resumed = pretrain(cfg, tmp_path / "run", resume=True, progress=False)["info"]
    assert resumed["resumed_from"] == 2 and full["resumed_from"] == 0
    assert resumed["passes"] == full["passes"] and resumed["passes_whole_run"] is True
    assert full["passes"]["backwards"] >= 4 and full["passes"]["backward_tokens"] > 0
