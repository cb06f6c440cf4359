"""Every registered training method: two steps on a tiny model.

Losses are finite, every trainable parameter changes and every frozen one does not.
"""

import pytest
import torch

from obliviate.errors import ConfigError, DataError, ModelError
from obliviate.methods import METHODS, get_method, method_names
from obliviate.train import TrainConfig
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.tasks.base import PreferredAnswers

FORGET = [("Question: What is Morvexia treated with?\nAnswer:", " Morvexia is treated with zalpradine."),
          ("Question: What does Morvexia cause?\nAnswer:", " Morvexia causes cold skin.")]
RETAIN = [("Question: Where does the glimmerfin live?\nAnswer:", " The glimmerfin lives in cold caves."),
          ("Question: What does the glimmerfin eat?\nAnswer:", " The glimmerfin eats moss.")]

TRAIN_METHODS = [n for n in method_names() if getattr(METHODS[n], "kind", "train") == "train"]


def _cfg(name, **kw):
    return UnlearnConfig(method=name, batch_size=2,
                         train=TrainConfig(steps=2, lr=1e-2, schedule="constant", progress=False, log_every=1), **kw)


@pytest.mark.parametrize("name", TRAIN_METHODS)
def test_two_steps_change_exactly_the_trainable_parameters(name, tiny_model, tiny_tokenizer):
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    chosen = PreferredAnswers([" Morvexia is treated with rest.", " Morvexia causes nothing."])  # dpo: preference data
    model, summary = unlearn(tiny_model, tiny_tokenizer, FORGET, RETAIN, _cfg(name),
                             idk=chosen if name == "dpo" else None)
    losses = [r for r in summary["history"] if "loss" in r]
    assert losses and all(torch.isfinite(torch.tensor(r["loss"])) for r in losses)
    import fnmatch

    trainable = {n for n in before if any(fnmatch.fnmatch(n, p) for p in summary["trainable"])}
    assert trainable, "method trains nothing"
    for n, p in model.named_parameters():
        changed = not torch.equal(p.detach(), before[n])
        assert changed == (n in trainable), f"{name}: {n} changed={changed}"


@pytest.mark.parametrize("name", ["npo", "rmu"])
def test_lora_mode_reference_is_adapter_disabled(name, tiny_model, tiny_tokenizer):
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    model, summary = unlearn(tiny_model, tiny_tokenizer, FORGET, RETAIN, _cfg(name, lora=True, lora_r=2))
    assert summary["trainable"] == ["*lora_*"]
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed  # merged adapters changed the targeted weights
    if name == "rmu":
        assert all("down_proj" in n for n in changed)


def test_unknown_method_lists_known():
    with pytest.raises(ConfigError) as e:
        get_method("nope")
    assert "graddiff" in str(e.value) and "rmu" in str(e.value)


def test_bad_inputs_fail_before_training(tiny_model, tiny_tokenizer):
    with pytest.raises(DataError, match="forget set is empty"):
        unlearn(tiny_model, tiny_tokenizer, [], RETAIN, _cfg("graddiff"))
    with pytest.raises(ModelError, match="9"):
        unlearn(tiny_model, tiny_tokenizer, FORGET, RETAIN, _cfg("rmu", params={"layer": 9}))
    with pytest.raises(ConfigError, match="bogus"):
        unlearn(tiny_model, tiny_tokenizer, FORGET, RETAIN, _cfg("npo", params={"bogus": 1}))
