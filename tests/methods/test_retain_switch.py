"""``retain=nll`` and ``retain=kl`` for every method of the shared objective ``gamma * L_forget + alpha * L_retain``:
one implementation (:func:`obliviate.unlearning.objectives.retain_term`, reached through ``forget_and_retain``),
checked against the plain per-example NLL and KL(p_ref || p_theta), and run through the engine."""

import copy

import pytest
import torch

import obliviate.unlearning.objectives as objectives
from _reference import paired_batch, retain_kl, retain_nll
from obliviate.methods import build_method
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.unlearning.reference import Reference
from obliviate.tasks.base import PreferredAnswers
from obliviate.train import TrainConfig

METHODS = ["gradascent", "graddiff", "npo", "simnpo", "dpo", "undial"]
CHOSEN = ["Morvexia is treated with rest.", "The glimmerfin eats algae.", "Nobody I know of."]


@pytest.mark.parametrize("retain", ["nll", "kl"])
@pytest.mark.parametrize("name", METHODS)
def test_the_retain_term_is_the_shared_one(name, retain, double_model, tiny_tokenizer, monkeypatch):
    ref_model = copy.deepcopy(double_model).eval()
    with torch.no_grad():
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    calls = []
    shared = objectives.retain_term
    monkeypatch.setattr(objectives, "retain_term", lambda *a: calls.append(a[3]) or shared(*a))
    method = build_method(name, {"retain": retain, "alpha": 0.7})
    assert method.needs_reference or retain == "nll"  # kl reads the live reference
    batch = paired_batch(tiny_tokenizer, idk=CHOSEN)
    terms = method.loss(double_model, batch, Reference(ref_model, shared=False))
    expected = retain_nll(double_model, batch["retain"]) if retain == "nll" else \
        retain_kl(double_model, ref_model, batch["retain"])
    assert calls == [retain]
    assert float(terms["retain"].detach()) == pytest.approx(0.7 * float(expected.detach()), rel=1e-6)


@pytest.mark.parametrize("retain", ["nll", "kl"])
@pytest.mark.parametrize("name", METHODS)
def test_both_run_through_the_engine(name, retain, tiny_model, tiny_tokenizer):
    forget = [("Question: What is Morvexia treated with?\nAnswer:", " Morvexia is treated with zalpradine."),
              ("Question: What does Morvexia cause?\nAnswer:", " Morvexia causes cold skin.")]
    keep = [("Question: Where does the glimmerfin live?\nAnswer:", " The glimmerfin lives in cold caves."),
            ("Question: What does the glimmerfin eat?\nAnswer:", " The glimmerfin eats moss.")]
    cfg = UnlearnConfig(method=name, batch_size=2, params={"retain": retain, "alpha": 1.0},
                        train=TrainConfig(steps=2, lr=1e-3, schedule="constant", progress=False, log_every=1))
    _, summary = unlearn(tiny_model, tiny_tokenizer, forget, keep, cfg,
                         idk=PreferredAnswers([" rest.", " nothing."]) if name == "dpo" else None)
    logged = [r for r in summary["history"] if "retain" in r]
    assert logged and all(torch.isfinite(torch.tensor(r["retain"])) for r in logged)
