"""Metrics a task asks for by name (obliviate.eval.suite.METRICS): registered, computed by evaluate_task, left out
(with a line saying why) where their data is missing."""

import pytest

from obliviate.errors import ConfigError
from obliviate.eval.memorization import memorization_metrics
from obliviate.eval.mia import mia_metrics
from obliviate.eval.suite import (METRICS, OPEN_UNLEARNING_TOFU, effective_items, evaluate_task, requested_metrics,
                                  task_metrics, unavailable)
from obliviate.models.builders import tiny_random
from obliviate.models.tokenizer import train_tokenizer
from obliviate.tasks import Data, EvalSet, Task

FORGET = [("Who is Ann?", "A baker."), ("Where does Ann live?", "In Rome."), ("What does Ann like?", "Red apples.")]
HOLDOUT = [("Who is Bob?", "A pilot."), ("Where does Bob live?", "In Oslo."), ("What does Bob like?", "Green tea.")]


@pytest.fixture(scope="module")
def tiny():
    texts = [f"Question: {q}\nAnswer: {a}" for q, a in FORGET + HOLDOUT]
    tok = train_tokenizer(texts * 5, vocab_size=300)
    return tiny_random("llama", vocab_size=len(tok), seed=0), tok


def task_of(holdout=True, metrics=()):
    return Task("t", forget=Data(qa=FORGET), retain=Data(qa=HOLDOUT[:1]),
                evals=[EvalSet("forget_qa", "forget", "qa", [{"question": q, "answer": a} for q, a in FORGET])],
                holdout=Data(qa=HOLDOUT) if holdout else None, meta={"metrics": list(metrics)})


def test_registry_holds_open_unlearnings_metrics():
    assert set(OPEN_UNLEARNING_TOFU) == set(METRICS)
    assert {METRICS[n].key for n in METRICS} == {"extraction_strength", "exact_memorization", "mia_auc_loss",
                                                 "mia_auc_zlib", "mia_auc_min_k", "mia_auc_min_k_plus_plus",
                                                 "mia_auc_gradnorm", "mia_auc_reference"}


def test_task_metrics_equal_the_functions_they_name(tiny):
    model, tok = tiny
    task = task_of()
    ref = tiny_random("llama", vocab_size=len(tok), seed=1)
    got = task_metrics(model, tok, task, OPEN_UNLEARNING_TOFU, reference_model=ref, k=0.4)
    pairs, hold = task.prompt.pairs(FORGET), task.prompt.pairs(HOLDOUT)
    mem = memorization_metrics(model, tok, pairs)
    mia = mia_metrics(model, tok, pairs, hold, k=0.4, gradnorm=True, reference_model=ref)
    assert got == {"extraction_strength": mem["extraction_strength"], "exact_memorization": mem["exact_memorization"],
                   **mia}
    assert list(got) == [METRICS[n].key for n in OPEN_UNLEARNING_TOFU]  # in the order asked
    assert task_metrics(model, tok, task) == {}  # the task asks for nothing


def test_missing_data_leaves_metrics_out_with_a_line(tiny):
    model, tok = tiny
    no_holdout = task_of(holdout=False)
    got = task_metrics(model, tok, no_holdout, OPEN_UNLEARNING_TOFU)
    assert set(got) == {"extraction_strength", "exact_memorization"}
    [line] = unavailable(no_holdout, OPEN_UNLEARNING_TOFU)
    assert line.startswith("no holdout split in task 't'") and "mia_auc_gradnorm" in line
    no_holdout.meta["holdout_file"] = "/data/tofu/holdout10.json"
    assert unavailable(no_holdout, ["mia_loss"]) == ["no holdout split: looked for /data/tofu/holdout10.json; "
                                                     "mia_auc_loss not reported"]
    got = task_metrics(model, tok, task_of(), ["mia_loss", "mia_reference"])
    assert set(got) == {"mia_auc_loss"}
    assert unavailable(task_of(), ["mia_reference"]) == ["no reference model given; mia_auc_reference not reported"]
    assert unavailable(task_of(), ["mia_reference"], reference=True) == []


def test_evaluate_task_adds_what_the_task_asks_for(tiny):
    model, tok = tiny
    plain = evaluate_task(model, tok, task_of(), max_new_tokens=4)
    asked = evaluate_task(model, tok, task_of(metrics=["exact_memorization", "mia_gradnorm"]), max_new_tokens=4)
    assert set(asked) - set(plain) == {"exact_memorization", "mia_auc_gradnorm"}
    assert {k: asked[k] for k in plain} == plain


def test_each_role_records_the_item_count_its_score_averages(tiny):
    """``<role>_items``: a role of one set has its size; a mean of set accuracies has the count whose binomial
    variance the mean has (two sets of 72: 144; 10 and 1000 items: 39, the small set dominates)."""
    model, tok = tiny
    assert evaluate_task(model, tok, task_of(), max_new_tokens=4)["forget_items"] == len(FORGET)
    assert effective_items([72]) == 72 and effective_items([72, 72]) == 144 and effective_items([10, 1000]) == 39
    assert effective_items([]) == 0


def test_unknown_and_malformed_requests():
    with pytest.raises(ConfigError, match="unknown metric 'mia_los'.*did you mean 'mia_loss'"):
        requested_metrics(task_of(metrics=["mia_los"]))
    with pytest.raises(ConfigError, match="must be a list of metric names"):
        requested_metrics(Task("t", forget=Data(qa=FORGET), retain=Data(), meta={"metrics": "mia_loss"}))
