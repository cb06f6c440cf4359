"""The base model and the oracle pretrained at the same time (obliviate.train.pretrain.cached_pretrain_pair) are the
models one after the other, on one thread each, would be."""

import copy

import pytest
import torch
from safetensors.torch import load_file

from obliviate.train.pretrain import ModelConfig, PretrainConfig, cached_pretrain_pair
from obliviate.train import TrainConfig
from obliviate.world import WorldConfig


def _cfgs():
    world = WorldConfig(seed=0, n_forget=4, n_holdout=1, n_retain=4, n_general=2, n_concept=2, n_toxic=4)
    base = PretrainConfig(seed=0, world=world, model=ModelConfig(size="nano", vocab_size=400, max_len=64),
                          train=TrainConfig(steps=3, lr=3e-3, warmup_steps=1, log_every=1, progress=False),
                          batch_size=2, qa_batch_size=4)
    oracle = copy.deepcopy(base)
    oracle.exclude_splits = ["forget"]
    return base, oracle


@pytest.mark.heavy(9)
def test_parallel_pair_equals_sequential_on_one_thread(tmp_path, monkeypatch):
    base, oracle = _cfgs()
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path / "parallel"))
    par = cached_pretrain_pair(base, oracle, progress=False, parallel=True)
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path / "sequential"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seq = cached_pretrain_pair(base, oracle, progress=False, parallel=False)
    finally:
        torch.set_num_threads(threads)
    assert par[0] != par[1]
    for a, b in zip(par, seq):
        wa, wb = load_file(str(a / "model" / "model.safetensors")), load_file(str(b / "model" / "model.safetensors"))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
