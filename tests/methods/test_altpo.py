"""AltPO: its loss is DPO's with the model's own alternate answers as the preferred ones (checked against the
equation per example, as DPO's), the alternates a seeded, cached data step; tiny runs.

open-unlearning compared: AltPO runs there as the DPO trainer (src/trainer/unlearn/dpo.py, afcd6b6) on the
alternates of community/methods/AltPO/generate.py (5420d43).
"""

import copy
import json

import torch

from _reference import FORGET, RETAIN, assert_same, retain_nll, run_tiny
from obliviate.data import as_data
from obliviate.methods import build_method
from obliviate.methods.alternates import _norm, alternate_answers
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import Reference
from obliviate.utils import cache_dir
from test_dpo import dpo_reference


def test_alternates_differ_from_the_answers_are_seeded_and_cached(taught):
    model, tok, task = taught["model"], taught["tokenizer"], taught["task"]
    answers = [a for _, a in task.forget.qa]
    # through the method, on the task's own prompt: the model answers every question right greedily, so the
    # alternates come from sampling (20 tries at temperature 2)
    alts = build_method("altpo", {"tries": 20, "temperature": 2.0}).winners(model, tok, task.forget, None, task.prompt)
    assert len(alts) == len(answers) and all(_norm(x) != _norm(a) for x, a in zip(alts, answers)), alts
    prompts = [p + task.prompt.answer("") for p, _ in task.prompt.pairs(task.forget.qa, tok)]
    alts = alternate_answers(model, tok, prompts, answers, seed=3, temperature=2.0)
    assert len(alts) == len(answers) and all(alts)
    files = list((cache_dir() / "alternates").glob("*.json"))
    assert files and any(json.loads(f.read_text())["alternates"] == alts for f in files)
    for f in files:  # a second call reads the cache: the file's answers come back, not new samples
        data = json.loads(f.read_text())
        if data["alternates"] == alts:
            f.write_text(json.dumps({**data, "alternates": ["cached"] * len(alts)}))
    assert alternate_answers(model, tok, prompts, answers, seed=3, temperature=2.0) == ["cached"] * len(alts)
    assert alternate_answers(model, tok, prompts, answers, seed=3, temperature=2.0, cache=False) == alts  # seeded


def test_loss_and_gradient_match_dpo_on_the_alternates(double_model, tiny_tokenizer):
    method = build_method("altpo", {"beta": 0.3, "alpha": 1.0, "temperature": 1.5})
    alts = method.winners(double_model, tiny_tokenizer, as_data(FORGET), None, None)
    assert len(alts) == len(FORGET) and all(isinstance(a, str) and a for a in alts)
    ref_model = copy.deepcopy(double_model).eval()
    with torch.no_grad():
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = PairedData(tiny_tokenizer, FORGET, RETAIN, 3, seed=0, idk=alts)(0)
    loss = sum(method.loss(double_model, batch, Reference(ref_model, shared=False)).values())
    expected = dpo_reference(double_model, ref_model, batch["forget"], batch["idk"], 0.3) + \
        retain_nll(double_model, batch["retain"])
    assert_same(loss, double_model, expected)


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, _ = run_tiny("altpo", world_base, fresh)
    assert after > before


def test_runs_on_a_user_qa_file(taught, fresh):
    before, after, _ = run_tiny("altpo", taught, fresh)
    assert after > before
