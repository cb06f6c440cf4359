"""The method contract (obliviate.unlearning.contract): registration refuses broken classes, and a method that reads
the reference without declaring it gets a one-line error naming it, not a None error."""

from dataclasses import dataclass

import pytest

from obliviate.errors import ConfigError
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.losses import lm_loss
from obliviate.methods import METHODS, register
from obliviate.unlearning.contract import Method
from obliviate.train import TrainConfig


DECLARATIONS = ("needs_reference", "needs_idk", "multiprocess_unsupported", "sharding_unsupported")


@dataclass
class _Cfg:
    pass


def test_every_registered_method_keeps_the_contract():
    from obliviate.methods import method_names

    for name in method_names():
        cls = METHODS[name]
        assert issubclass(cls, Method), name
        for attr in DECLARATIONS:
            assert hasattr(cls, attr), (name, attr)
        if cls.kind == "train":
            assert cls.trainable is not Method.trainable and cls.loss is not Method.loss, name


def test_registration_refuses_broken_classes():
    with pytest.raises(ConfigError, match="lacks loss"):
        @register("_broken_no_loss")
        class A(Method):
            config_cls = _Cfg

            def trainable(self, model):
                return ["*"]
    with pytest.raises(ConfigError, match="needs_reference is False"):
        @register("_broken_cache")
        class B(Method):
            config_cls = _Cfg

            def trainable(self, model):
                return ["*"]

            def loss(self, model, batch, ref):
                return {}

            def cached_reference_keys(self):
                return ("forget",)
    with pytest.raises(ConfigError, match="go together"):
        @register("_broken_state")
        class C(Method):
            config_cls = _Cfg

            def trainable(self, model):
                return ["*"]

            def loss(self, model, batch, ref):
                return {}

            def scorer_state(self):
                return {"w": 1}
    with pytest.raises(ConfigError, match="must subclass obliviate.unlearning.contract.Method"):
        @register("_broken_base")
        class D:
            config_cls = _Cfg

            def trainable(self, model):
                return ["*"]

            def loss(self, model, batch, ref):
                return {}
    assert not {"_broken_no_loss", "_broken_cache", "_broken_state", "_broken_base"} & set(METHODS)


def test_an_undeclared_reference_is_a_clear_error(tiny_model, tiny_tokenizer):
    @register("_sneaky_ref")
    class Sneaky(Method):
        config_cls = _Cfg

        def trainable(self, model):
            return ["*"]

        def loss(self, model, batch, ref):
            return {"forget": lm_loss(model, batch["forget"]) - ref.logits(batch["forget"]).mean()}

    try:
        pairs = [("Question: a?\nAnswer:", " b.")] * 2
        cfg = UnlearnConfig(method="_sneaky_ref", batch_size=2,
                            train=TrainConfig(steps=1, lr=1e-3, progress=False))
        with pytest.raises(ConfigError, match="'_sneaky_ref' uses the reference model .*needs_reference = True"):
            unlearn(tiny_model, tiny_tokenizer, pairs, [("Question: c?\nAnswer:", " d.")] * 2, cfg)
    finally:
        METHODS.pop("_sneaky_ref", None)
