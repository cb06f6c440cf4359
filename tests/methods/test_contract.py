"""The method contract (obliviate.unlearning.contract): registration refuses broken classes, and a method that reads
the reference without declaring it gets a one-line error naming it, not a None error."""

import dataclasses
from dataclasses import dataclass

import pytest

from obliviate.errors import ConfigError
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.losses import lm_loss
from obliviate.methods import METHODS, build_method, method_names, register
from obliviate.unlearning.contract import Method
from obliviate.train import TrainConfig


DECLARATIONS = ("needs_reference", "needs_idk", "multiprocess_unsupported", "sharding_unsupported")


@dataclass
class _Cfg:
    pass


def test_every_registered_method_keeps_the_contract():
    for name in method_names():
        cls = METHODS[name]
        assert issubclass(cls, Method), name
        for attr in DECLARATIONS:
            assert hasattr(cls, attr), (name, attr)
        if cls.kind == "train":
            assert cls.loss is not Method.loss, name


def test_the_contract_gives_the_defaults_methods_used_to_copy(tiny_model):
    """A training method that writes only ``loss`` trains every parameter, and a KL retain term needs the reference:
    every method with a ``retain`` of "nll" or "kl" reads the reference at "kl" (with a retain weight) and, at "nll",
    as its class declares."""

    @dataclass
    class _RetainCfg:
        retain: str = "nll"

    @register("_only_loss")
    class OnlyLoss(Method):
        config_cls = _RetainCfg

        def loss(self, model, batch, ref):
            return {}

    try:
        assert OnlyLoss(_RetainCfg()).trainable(tiny_model) == ["*"] and OnlyLoss.trains == "all parameters"
        assert not OnlyLoss(_RetainCfg("nll")).needs_reference and OnlyLoss(_RetainCfg("kl")).needs_reference
    finally:
        METHODS.remove("_only_loss")
    checked = []
    for name in method_names():
        fields = {f.name: f for f in dataclasses.fields(METHODS[name].config_cls)}
        if "retain" not in fields or "kl" not in str(fields["retain"].type):
            continue
        weight = {"alpha": 1.0} if "alpha" in fields else {}
        assert build_method(name, {"retain": "kl", **weight}).needs_reference, name
        assert build_method(name, {"retain": "nll", **weight}).needs_reference == METHODS[name].needs_reference, name
        checked.append(name)
    assert {"graddiff", "simnpo", "wga", "pdu", "atwu", "atwu_simnpo", "sam_graddiff", "npo"} <= set(checked), checked


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
        METHODS.remove("_sneaky_ref")
