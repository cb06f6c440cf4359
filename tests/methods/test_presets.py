"""Every registered method carries a tiny and a paper preset, valid for its config."""

import argparse
import dataclasses

import pytest

from obliviate.cli.methods import cmd_methods
from obliviate.errors import ConfigError
from obliviate.methods import (
    METHODS,
    PRESETS,
    build_method,
    method_defaults,
    method_names,
    preset_name,
    register,
)
from obliviate.unlearning.contract import Method
from obliviate.methods.rmu import rmu_layer

NAMES = method_names()

RECORDED_TINY = {
    # compare.TINY_DEFAULTS before the presets moved into the method files (tuned on world seed 0,
    # docs/results.md), plus layer_frac = 0.5 for the RMU family: n_layers // 2, their implicit layer then.
    # GradDiff and NPO weigh the retain term 10x (alpha 10, as RMU does): with alpha 1, on a
    # 2-layer model fine-tuned on 32 QA pairs (tests/tasks), both methods took the retain QA down with
    # the forget QA (retain exact match 0.12-0.19 after 50 steps); with these weights it stays >= 0.88.
    "gradascent": {"lr": 3e-4, "steps": 20, "params": {}},
    "graddiff": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0}},
    "npo": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0}},
    "simnpo": {"lr": 1e-3, "steps": 50, "params": {}},
    "idkdpo": {"lr": 3e-4, "steps": 50, "params": {}},
    "wga": {"lr": 1e-3, "steps": 50, "params": {}},
    # RMU's c = max(20, 1.5 x the measured hidden-state norm) since #29: 20 on the world models (tests/methods/
    # test_rmu_scaling.py), larger where the hidden states are large.
    "rmu": {"lr": 1e-3, "steps": 50, "params": {"coef": 20.0, "coef_norm": 1.5, "alpha": 10.0, "layer_frac": 0.5}},
    "adaptive_rmu": {"lr": 1e-3, "steps": 50, "params": {"alpha": 10.0, "layer_frac": 0.5}},
    "cosine_rmu": {"lr": 1e-3, "steps": 50, "params": {"alpha": 10.0, "layer_frac": 0.5}},
    # Issue #44's robust methods, set in their files (not tuned on the world yet): the GradDiff/NPO-based ones take
    # those methods' tiny settings (lr 3e-4, alpha 10); UNDO runs 50 unlearning + 50 distillation steps; SAM's
    # radius and RepNoise's noise weight are sized for a few-million-parameter model; TAR runs one attack per step
    # at lrs around the world relearning attack's.
    "undo": {"lr": 3e-4, "steps": 100, "params": {"base_alpha": 10.0}},
    "sam_npo": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0, "rho": 0.05}},
    "sam_graddiff": {"lr": 3e-4, "steps": 50, "params": {"alpha": 10.0, "rho": 0.05}},
    "repnoise": {"lr": 1e-3, "steps": 50, "params": {"beta": 1.0}},
    "tar": {"lr": 1e-3, "steps": 50, "params": {"attacks": 1, "attack_lrs": [1e-4, 3e-4, 1e-3]}},
    # MUDMAN (issue #59): chosen on world seed 0 from lr x gamma x trained weights (docs/methods.md, "mudman"); the
    # adversary's SGD lr at the top of the authors' range for their smallest model, reset every 10 of the 50 steps.
    "mudman": {"lr": 1e-3, "steps": 50, "params": {"gamma": 0.3, "adv_lr": 0.1, "fork_every": 10}},
}
FALLBACK = {"lr": 1e-3, "steps": 50, "params": {}}
"""compare.FALLBACK_DEFAULT: every method the table did not list."""


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_builds_a_valid_config(name, preset):
    d = method_defaults(name, preset)
    assert set(d) == {"lr", "steps", "params"}
    assert isinstance(d["lr"], float) and d["lr"] > 0
    assert isinstance(d["steps"], int) and d["steps"] >= 1
    method = build_method(name, d["params"])
    for key, value in d["params"].items():
        assert getattr(method.cfg, key) == value


@pytest.mark.parametrize("name", NAMES)
def test_tiny_presets_are_the_recorded_values(name):
    assert method_defaults(name, "tiny") == RECORDED_TINY.get(name, FALLBACK)


def test_paper_presets_of_rmu_and_npo():
    assert method_defaults("rmu", "paper") == {"lr": 5e-5, "steps": 150,
                                                "params": {"coef": 6.5, "alpha": 1200.0, "layer_frac": 7 / 32}}
    npo = method_defaults("npo", "paper")
    assert npo["lr"] == 1e-5 and npo["params"] == {"beta": 0.1}


def test_method_defaults_is_a_copy():
    method_defaults("rmu", "tiny")["params"]["coef"] = -1.0
    assert method_defaults("rmu", "tiny")["params"]["coef"] == 20.0


def test_unknown_preset_names_the_valid_ones():
    with pytest.raises(ConfigError, match="'huge'.*tiny, paper"):
        method_defaults("rmu", "huge")


def test_preset_name_by_parameter_count(tiny_model):
    assert sum(p.numel() for p in tiny_model.parameters()) < 1_000_000
    assert preset_name(tiny_model) == "tiny"
    assert preset_name(1_000_000) == "tiny"
    assert preset_name(99_999_999) == "tiny"
    assert preset_name(100_000_000) == "paper"
    assert preset_name(1_000_000_000) == "paper"
    with pytest.raises(ConfigError, match="parameter count"):
        preset_name("big")


@pytest.mark.parametrize("n_layers,frac,expected", [
    (32, 7 / 32, 7),  # WMDP: Zephyr-7B, layer 7 of 32
    (24, 7 / 32, 5),  # 5.25
    (4, 7 / 32, 1),  # 0.875
    (1, 7 / 32, 0),
    (4, 0.5, 2), (3, 0.5, 1), (5, 0.5, 2), (2, 0.5, 1), (1, 0.5, 0),  # 0.5 is n_layers // 2
    (4, 1.0, 3), (4, 0.0, 0),  # clamped to 0..n_layers-1
])
def test_rmu_layer_fraction_rule(n_layers, frac, expected):
    assert rmu_layer(n_layers, frac) == expected


@pytest.mark.parametrize("name", ["rmu", "adaptive_rmu", "cosine_rmu"])
def test_rmu_default_layer_is_wmdp_fraction_and_tiny_keeps_the_middle(name, tiny_model):
    method = build_method(name)
    assert method.cfg.layer is None and method.cfg.layer_frac == 7 / 32
    assert rmu_layer(32, method.cfg.layer_frac) == 7
    method.trainable(tiny_model)  # 4 layers
    assert method.layer == 1
    tiny = build_method(name, method_defaults(name, "tiny")["params"])
    tiny.trainable(tiny_model)
    assert tiny.layer == 2  # 4 // 2, as before the fraction rule
    with pytest.raises(ConfigError, match="layer_frac"):
        build_method(name, {"layer_frac": 1.5})


def _fresh_class(config_cls):
    """A minimal training method (the contract: config_cls, trainable, loss)."""
    return type("Probe", (Method,), {"config_cls": config_cls, "trainable": lambda self, model: ["*"],
                              "loss": lambda self, model, batch, ref: {}})


@dataclasses.dataclass
class _Cfg:
    beta: float = 0.1


def test_register_fills_missing_presets_and_checks_them():
    cls = register("_preset_probe", paper="nobody")(_fresh_class(_Cfg))
    try:
        assert cls.presets == {"tiny": FALLBACK, "paper": {"lr": 1e-5, "steps": 125, "params": {}}}
        assert cls.paper == "nobody" and cls.kind == "train"
    finally:
        METHODS.remove("_preset_probe")
    bad = [({"tiny": {"params": {"gamma": 1.0}}}, "'gamma' is not a field of _Cfg"),
           ({"huge": {}}, "unknown preset 'huge'"),
           ({"tiny": {"lr": 1e-3, "epochs": 2}}, "unknown key 'epochs'"),
           ({"paper": {"lr": 0}}, "lr must be"),
           ({"paper": {"steps": 1.5}}, "steps must be")]
    for presets, needle in bad:
        with pytest.raises(ConfigError, match=needle):
            register("_preset_probe", presets=presets)(_fresh_class(_Cfg))
        assert "_preset_probe" not in METHODS


def test_methods_verbose_prints_one_line_each(capsys):
    cmd_methods(argparse.Namespace(verbose=True))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(NAMES)
    rmu = next(l for l in lines if l.split()[0] == "rmu")
    assert ("train" in rmu and "lr=0.001 steps=50 coef=20.0 coef_norm=1.5 alpha=10.0 layer_frac=0.5" in rmu
            and "WMDP" in rmu)
    assert next(l for l in lines if l.split()[0] == "ember").split()[1] == "edit"
    npo = next(l for l in lines if l.split()[0] == "npo")
    assert "retain: nll|kl (kl: a live frozen reference)" in npo and "retain:" not in rmu  # the shared switch only
    # what each holds of the frozen model, as the engine builds it (make_reference)
    held = {l.split()[0]: l.split("reference: ")[1].split("  |")[0] for l in lines}
    assert held["rmu"] == held["probe_unlearn"] == "cached hidden states" and held["npo"] == "cached log-probs"
    assert held["atwu_npo"] == held["atwu_idkdpo"] == "cached log-probs"
    assert held["gradascent"] == held["ember"] == "none" and held["undial"] == "cached logits"
    assert held["crisp"] == "cached hidden states"
    assert "frozen copy" not in held.values()  # the performance goal: no method holds a whole copy by default
    cmd_methods(argparse.Namespace(verbose=False))
    assert capsys.readouterr().out.split() == NAMES
