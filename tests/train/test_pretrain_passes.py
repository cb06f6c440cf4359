"""A pretraining's recorded passes (``pretrain.json``'s ``passes``, what compare's cost shares divide by) are those of
the whole run, a run killed after a checkpoint and resumed included (issue #59)."""

import pytest

import obliviate.train.loop as loop
from obliviate.models.layers import ResumablePasses
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

    def killed_and_resumed(name: str) -> dict:
        monkeypatch.setattr(loop, "save_checkpoint", save_then_stop)
        with pytest.raises(Stop):
            pretrain(cfg, tmp_path / name, resume=False, progress=False)
        monkeypatch.setattr(loop, "save_checkpoint", real_save)
        monkeypatch.undo()  # the counts saved as this obliviate saves them, from here on
        monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path / "cache"))
        return pretrain(cfg, tmp_path / name, resume=True, progress=False)["info"]

    resumed = killed_and_resumed("run")
    assert resumed["resumed_from"] == 2 and full["resumed_from"] == 0 and full["passes_whole_run"] is True
    assert resumed["passes"] == full["passes"] and resumed["passes_whole_run"] is True
    assert full["passes"]["backwards"] >= 4 and full["passes"]["backward_tokens"] > 0
    # a checkpoint saved without the counts (an older obliviate's): the record says it is not the whole run
    monkeypatch.setattr(ResumablePasses, "_get", lambda self: {})
    old = killed_and_resumed("old")
    assert old["resumed_from"] == 2 and old["passes_whole_run"] is False
    assert old["passes"]["backwards"] == full["passes"]["backwards"] // 2
