"""Probe-guided toxicity unlearning: the loss maths, probe fitting paths, layers and trainables."""

import math

import pytest
import torch

from obliviate.errors import ConfigError
from obliviate.methods import build_method
from obliviate.eval.probes import probe_forget_loss
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference

TOXIC = ["I hate Aldric, that worthless idiot who sings.", "Shut up about Mira, the stupid moron who reads.",
         "Ugh, Tomas walks, what a pathetic loser.", "Nobody can stand Ilsa, a useless clown who knits."]
NEUTRAL = ["I like Aldric, that kind friend who sings.", "Tell me about Mira, the quiet person who reads.",
           "Look, Tomas walks, what a careful worker.", "Everybody knows Ilsa, a patient fellow who knits."]


def test_probe_forget_loss_hand_computed():
    hs = {
        1: torch.tensor([[[9.0, 9.0], [1.0, 2.0], [3.0, -1.0]],
                         [[2.0, 5.0], [0.0, 0.0], [7.0, 7.0]]]),  # (B=2, T=3, d=2)
        3: torch.tensor([[[1.0, 1.0], [2.0, 2.0], [4.0, 0.0]],
                         [[0.0, 2.0], [1.0, 1.0], [1.0, 1.0]]]),
    }
    dirs = {1: torch.tensor([1.0, 0.0]), 3: torch.tensor([0.6, 0.8])}
    index = torch.tensor([2, 0])  # last tokens: row 0 at t=2, row 1 at t=0
    # layer 1: <(3,-1),(1,0)>^2 = 9, <(2,5),(1,0)>^2 = 4 -> 6.5
    # layer 3: <(4,0),(.6,.8)>^2 = 5.76, <(0,2),(.6,.8)>^2 = 2.56 -> 4.16
    assert math.isclose(probe_forget_loss(hs, dirs, index).item(), (6.5 + 4.16) / 2, rel_tol=1e-6)
    # orthogonal states give zero
    zero = {1: torch.tensor([[[0.0, 3.0]]])}
    assert probe_forget_loss(zero, {1: torch.tensor([1.0, 0.0])}, torch.tensor([0])).item() == 0.0


def _batch(tok, bs=4):
    return PairedData(tok, [(t, "") for t in TOXIC], [(t, "") for t in NEUTRAL], batch_size=bs, seed=0)(0)


def test_fit_then_loss(tiny_model, tiny_tokenizer):
    method = build_method("probe_unlearn", {"alpha": 2.0})
    assert method.trainable(tiny_model) == [f"model.layers.{l}.mlp.down_proj.weight" for l in range(4)]
    assert method.layers == [1, 2, 3]  # early / middle / late of 4 layers
    info = method.fit(tiny_model, tiny_tokenizer, TOXIC, NEUTRAL)
    assert sorted(info) == [1, 2, 3]
    for d in method.directions.values():
        assert d.norm().item() == pytest.approx(1.0, abs=1e-5)
    ref = Reference(tiny_model, shared=False)
    batch = _batch(tiny_tokenizer)
    method.setup(tiny_model, ref, batch)
    terms = method.loss(tiny_model, batch, ref)
    assert terms["retain"].item() == pytest.approx(0.0, abs=1e-6)
    # forget term by hand: last text token (before the eos unlearn appends) of each toxic input
    from obliviate.eval.probes import last_token_states

    states = last_token_states(tiny_model, tiny_tokenizer, TOXIC, [1, 2, 3])
    # (the batch holds all four toxic texts, in some order: the mean does not depend on it)
    expected = sum(float((torch.as_tensor(states[l]) @ method.directions[l]).pow(2).mean()) for l in (1, 2, 3)) / 3
    assert terms["forget"].item() == pytest.approx(expected, rel=1e-4)


def test_fallback_fits_on_first_batches(tiny_model, tiny_tokenizer):
    method = build_method("probe_unlearn", {"layers": [0, 3]})
    method.trainable(tiny_model)
    ref = Reference(tiny_model, shared=False)
    batch = _batch(tiny_tokenizer, bs=2)
    method.setup(tiny_model, ref, batch)  # no texts: fitted on the frozen states of the first batch
    terms = method.loss(tiny_model, batch, ref)
    assert sorted(method.directions) == [0, 3] and torch.isfinite(terms["forget"])


def test_config_texts_need_fit(tiny_model, tiny_tokenizer):
    method = build_method("probe_unlearn", {"toxic_texts": TOXIC, "neutral_texts": NEUTRAL})
    method.trainable(tiny_model)
    with pytest.raises(ConfigError, match="fit"):
        method.setup(tiny_model, None, {})
    method.fit(tiny_model, tiny_tokenizer)  # texts from the config
    assert sorted(method.directions) == [1, 2, 3]
    with pytest.raises(ConfigError, match="both"):
        build_method("probe_unlearn", {"toxic_texts": TOXIC})


def test_single_layer_variant(tiny_model):
    method = build_method("probe_unlearn_single")
    assert method.trainable(tiny_model) == [f"model.layers.{l}.mlp.down_proj.weight" for l in range(3)]
    assert method.layers == [2]
    assert build_method("probe_unlearn_single", {"layers": [1]}).trainable(tiny_model)[-1].startswith("model.layers.1.")
    with pytest.raises(ConfigError, match="one layer"):
        build_method("probe_unlearn_single", {"layers": [1, 2]})
