"""DPO on preference data against its equation (Rafailov et al. 2023, with the -(2/beta) scaling of TOFU and
open-unlearning) written out per example; preference files with their own field names; tiny runs.

open-unlearning compared: ``compute_dpo_loss`` (src/trainer/utils.py, file version 19a6141) and
src/trainer/unlearn/dpo.py (afcd6b6): -2/beta * mean logsigmoid(beta * (win log-ratio - lose log-ratio)), the
log-ratios from summed answer-token NLLs, the same as here.
"""

import copy
import dataclasses
import json
import math

import pytest
import torch
import yaml

import obliviate
from _reference import assert_same, paired_batch, retain_kl, retain_nll, rows, run_tiny, seq_logprob
from obliviate.errors import DataError
from obliviate.methods import build_method
from obliviate.unlearning.reference import Reference
from obliviate.tasks.base import PreferredAnswers

CHOSEN = ["Morvexia is treated with rest.", "The glimmerfin eats algae.", "Nobody I know of."]


def dpo_reference(model, ref, forget, chosen, beta):
    """-(2/beta) mean_i log sigmoid(beta * ((lw_i - lw_ref_i) - (ll_i - ll_ref_i))), l = sum of answer log-probs."""
    total = 0.0
    pairs = list(zip(rows(forget), rows(chosen)))
    for (ids_l, t_l), (ids_w, t_w) in pairs:
        with torch.no_grad():
            lw_ref, ll_ref = seq_logprob(ref, ids_w, t_w), seq_logprob(ref, ids_l, t_l)
        margin = (seq_logprob(model, ids_w, t_w) - lw_ref) - (seq_logprob(model, ids_l, t_l) - ll_ref)
        total = total + torch.log(1 / (1 + torch.exp(-beta * margin)))
    return -(2 / beta) * total / len(pairs)


@pytest.mark.parametrize("retain", ["nll", "kl"])
def test_loss_and_gradient_match_the_equation(double_model, tiny_tokenizer, retain):
    ref_model = copy.deepcopy(double_model).eval()
    with torch.no_grad():
        for p in double_model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = paired_batch(tiny_tokenizer, idk=CHOSEN)
    method = build_method("dpo", {"beta": 0.5, "gamma": 1.2, "alpha": 0.6, "retain": retain})
    loss = sum(method.loss(double_model, batch, Reference(ref_model, shared=False)).values())
    retain_term = retain_nll(double_model, batch["retain"]) if retain == "nll" else \
        retain_kl(double_model, ref_model, batch["retain"])
    expected = 1.2 * dpo_reference(double_model, ref_model, batch["forget"], batch["idk"], 0.5) + 0.6 * retain_term
    assert_same(loss, double_model, expected)


def test_at_the_reference_the_loss_is_2_ln2_over_beta(double_model, tiny_tokenizer):
    """Every margin is 0 where the model is its reference: -(2/beta) log(1/2)."""
    batch = paired_batch(tiny_tokenizer, idk=CHOSEN)
    f = build_method("dpo", {"beta": 0.1, "alpha": 0.0}).loss(double_model, batch,
                                                              Reference(double_model, shared=False))["forget"]
    assert float(f.detach()) == pytest.approx(20 * math.log(2), rel=1e-6)


def _preference_file(tmp_path, qa, chosen, fields=("query", "good", "bad")):
    q, c, r = fields
    path = tmp_path / "prefs.jsonl"
    path.write_text("".join(json.dumps({q: a, c: w, r: l}) + "\n" for (a, l), w in zip(qa, chosen)))
    return path


def test_a_preference_file_with_its_own_field_names(tmp_path, taught):
    forget = list(taught["task"].forget.qa)
    chosen = [a for _, a in forget[1:] + forget[:1]]  # another fact's answer: plausible, and wrong
    path = _preference_file(tmp_path, forget, chosen)
    spec = {"forget": [{"path": str(path), "mapping": "question=query,answer=bad", "chosen": "good"}],
            "retain": [str(taught["retain"])]}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    task = obliviate.load_task(f"file:{tmp_path / 'spec.yaml'}")
    assert task.forget.qa == forget and isinstance(task.idk, PreferredAnswers) and list(task.idk) == chosen
    before, after, _ = run_tiny("dpo", {**taught, "task": task}, lambda m: copy.deepcopy(m).train())
    assert after > before


def test_prompt_chosen_rejected_fields_are_read_as_they_are(tmp_path):
    path = _preference_file(tmp_path, [("Q1?", "wrong one"), ("Q2?", "wrong two")], ["right one", "right two"],
                            fields=("prompt", "chosen", "rejected"))
    task = obliviate.load_task(forget=str(path), retain=str(path))
    assert task.forget.qa == [("Q1?", "wrong one"), ("Q2?", "wrong two")]
    assert list(task.idk) == ["right one", "right two"]


def test_without_preference_data_it_stops_in_one_line(taught, fresh):
    with pytest.raises(DataError, match="needs preference data"):
        run_tiny("dpo", taught, fresh)


def test_runs_on_the_world_base_model(world_base, fresh):
    task = world_base["task"]
    answers = [a for _, a in task.forget.qa]
    task = dataclasses.replace(task, idk=PreferredAnswers(answers[1:] + answers[:1]))
    before, after, _ = run_tiny("dpo", {**world_base, "task": task}, fresh)
    assert after > before
