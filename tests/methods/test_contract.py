"""The method contract (obliviate.methods.contract): registration refuses broken classes, and a method that reads
the reference without declaring it gets a one-line error naming it, not a None error."""

from dataclasses import dataclass

import pytest

from obliviate.errors import ConfigError
from obliviate.methods.engine import UnlearnConfig, unlearn
from obliviate.losses import lm_loss
from obliviate.methods import METHODS, register
from obliviate.methods.contract import DECLARATIONS, TrainingMethod
from obliviate.train import TrainConfig


@dataclass
class _Cfg:
    pass


def test_every_registered_method_keeps_the_contract():
    from obliviate.methods import method_names

    for name in method_names():
        cls = METHODS[name]
        for attr in DECLARATIONS:
            assert hasattr(cls, attr), (name, attr)
        if cls.kind == "train":
            assert isinstance(cls.__new__(cls), TrainingMethod), name


def test_registration_refuses_broken_classes():
    with pytest.raises(ConfigError, match="lacks loss"):
        @register("_broken_no_loss")
        class A:
            config_cls = _Cfg

            def trainable(self, model):
                return ["*"]
    with pytest.raises(ConfigError, match="needs_reference is False"):
        @register("_broken_cache")
        class B:
            config_cls = _Cfg

            def trainable(self, model):
                return ["*"]

            def loss(self, model, batch, ref):
                return {}

            def cached_reference_keys(self):
                return ("forget",)
    assert "_broken_no_loss" not in METHODS and "_broken_cache" not in METHODS


def test_an_undeclared_reference_is_a_clear_error(tiny_model, tiny_tokenizer):
    @register("_sneaky_ref")
    class Sneaky:
        config_cls = _Cfg

        def __init__(self, cfg):
            pass

        def trainable(self, model):
            return ["*"]

        def loss(self, model, batch, ref):
            return {"forget": lm_loss(model, batch["forget"]) - ref.logits(batch["forget"]).mean()}

    try:
        pairs = [("Question: a?\nAnswer:", " b.")] * 2
        cfg = UnlearnConfig(method="_sneaky_ref", batch_size=2,
                            train=TrainConfig(steps=1, lr=1e-3, progress=False))
        with pytest.raises(ConfigError, match="'_sneaky_ref' uses the reference model .*needs_reference = True"):
            unlearn(tiny_model, tiny_tokenizer, pairs, pairs, cfg)
    finally:
        METHODS.pop("_sneaky_ref", None)
