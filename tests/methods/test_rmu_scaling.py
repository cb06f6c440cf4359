"""The RMU family's steering coefficient measured against the layer's hidden-state norm (#29): one shared
measurement (:func:`obliviate.methods.rmu.hidden_norm`) for RMU's floor rule and Adaptive RMU's beta."""

import math

import pytest

from obliviate.errors import ConfigError
from obliviate.methods import build_method, method_defaults
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference
from obliviate.methods.rmu import hidden_norm
from obliviate.models.layers import hidden_states_at

FORGET = [("Question: What is Morvexia treated with?\nAnswer:", " zalpradine."), ("Question: Why?\nAnswer:", " No.")]
RETAIN = [("Question: Where does the glimmerfin live?\nAnswer:", " cold caves.")]


def _setup(model, tok, name, params):
    m = build_method(name, params)
    first = PairedData(tok, FORGET, RETAIN, batch_size=2, seed=0)(0)
    ref = Reference(model, shared=False)
    m.trainable(model)
    m.setup(model, ref, first)
    return m, ref, first["forget"]


def _norm_by_hand(model, batch, layer):
    h = hidden_states_at(model, batch["input_ids"], batch["attention_mask"], [layer], stop_after=layer)[layer]
    norms = h.detach().float().norm(dim=-1)
    m = batch["attention_mask"].bool()
    return float(norms[m].mean())


def test_hidden_norm_is_the_mean_norm_of_valid_tokens(tiny_model, tiny_tokenizer):
    m, ref, batch = _setup(tiny_model, tiny_tokenizer, "rmu", {"layer": 1})
    assert batch["attention_mask"].min() == 0  # two answers of different lengths: padding to leave out
    assert hidden_norm(ref, batch, 1, batch["attention_mask"]) == pytest.approx(_norm_by_hand(tiny_model, batch, 1),
                                                                                 rel=1e-5)


@pytest.mark.parametrize("coef,coef_norm", [(6.5, 0.0), (1e-3, 2.0), (1e6, 2.0)])
def test_rmu_coefficient_is_the_larger_of_coef_and_coef_norm_times_the_norm(tiny_model, tiny_tokenizer, coef,
                                                                             coef_norm):
    m, _, batch = _setup(tiny_model, tiny_tokenizer, "rmu", {"layer": 2, "coef": coef, "coef_norm": coef_norm})
    expected = coef if not coef_norm else max(coef, coef_norm * _norm_by_hand(tiny_model, batch, 2))
    assert m.coef == pytest.approx(expected, rel=1e-5)
    if coef == 1e-3:  # the measured side wins: a coefficient far below the norm would steer nothing
        assert m.coef > 100 * coef


def test_adaptive_rmu_uses_the_same_measurement(tiny_model, tiny_tokenizer):
    m, _, batch = _setup(tiny_model, tiny_tokenizer, "adaptive_rmu", {"layer": 2, "beta": 3.0})
    assert m.coef == pytest.approx(3.0 * _norm_by_hand(tiny_model, batch, 2), rel=1e-5)


def test_tiny_rmu_preset_scales_and_its_floor_is_the_world_value():
    p = method_defaults("rmu", "tiny")["params"]
    assert p["coef"] == 20.0 and p["coef_norm"] > 0  # c = max(20, coef_norm * ||h||)
    assert p["coef_norm"] * 12.5 < p["coef"]  # world seed 0's measured norm (docs/methods.md, "Presets") keeps c = 20
    assert method_defaults("rmu", "paper")["params"].get("coef_norm", 0.0) == 0.0  # the paper's c as published


def test_negative_coef_norm_is_one_line():
    with pytest.raises(ConfigError, match="coef_norm"):
        build_method("rmu", {"coef_norm": -1.0})
    assert math.isfinite(build_method("rmu", {"coef_norm": 0.0}).cfg.coef)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])  # the demo's world; seeds 1-3 not measured yet
def test_the_world_demo_keeps_rmu_c_20(seed, monkeypatch):
    """On the world's 4-layer Llama (the demo's base model, world seed 0 of docs/results.md) the measured side,
    1.5 x the mean norm at layer 2 on the first forget batch (12.5 when measured), is below the floor: the demo's
    RMU steers with c = 20 exactly, as before the rule (pretrains the world's base model once, cached)."""
    import dataclasses

    from obliviate.unlearning.engine import method_run_config, unlearn
    from obliviate.methods.rmu import RMU
    from obliviate.models.load import load_model, load_tokenizer
    from obliviate.pipelines.compare.run import CompareConfig
    from obliviate.tasks.world import world_task
    from obliviate.train.pretrain import cached_pretrain

    task = world_task(seed=seed)
    root = cached_pretrain(dataclasses.replace(CompareConfig(seed=seed).pretrain, world=task.pretrain), progress=False)
    model, tok = load_model(root / "model"), load_tokenizer(root / "model")
    seen = []
    setup = RMU.setup

    def recording(self, m, ref, batch):
        setup(self, m, ref, batch)
        f = batch["forget"]
        seen.append((self.layer, self.coef, hidden_norm(ref, f, self.layer, self._mask(f))))

    monkeypatch.setattr(RMU, "setup", recording)
    ucfg, _ = method_run_config("rmu", {"train": {"steps": 1}}, "tiny", seed)  # the demo's RMU run, one step
    unlearn(model, tok, task.forget, task.retain, ucfg, None, prompt=task.prompt, idk=task.idk, progress=False)
    (layer, coef, norm), = seen
    assert layer == 2 and ucfg.params["coef_norm"] * norm < 20.0 and coef == 20.0
