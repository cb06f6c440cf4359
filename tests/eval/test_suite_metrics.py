"""Metrics a task asks for by name (obliviate.eval.metric.METRICS): registered, computed by evaluate_task, left out
(with a line saying why) where their data is missing."""

import math

import pytest

from obliviate.errors import ConfigError
from obliviate.eval import memorization as memorization_module
from obliviate.eval import mia as mia_module
from obliviate.eval.memorization import memorization_metrics
from obliviate.eval.mia import mia_metrics
from obliviate.eval.metric import METRICS, requested_metrics, unavailable
from obliviate.eval.six_way import MODEL_METRICS
from obliviate.eval.suite import effective_items, evaluate_task, task_metrics
from obliviate.eval.tofu import TOFU_REPORT_METRICS
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


def test_one_registry_holds_open_unlearnings_and_muses_metrics():
    assert {METRICS[n].key for n in TOFU_REPORT_METRICS} == {
        "extraction_strength", "exact_memorization", "mia_auc_loss", "mia_auc_zlib", "mia_auc_min_k",
        "mia_auc_min_k_plus_plus", "mia_auc_gradnorm", "mia_auc_reference"}
    assert [METRICS[n].key for n in MODEL_METRICS] == ["muse_verbmem_f", "muse_knowmem_f", "muse_knowmem_r",
                                                       "muse_mia_auc"]
    keys = [METRICS[n].key for n in METRICS]
    assert len(keys) == len(set(keys)), "two metrics write one key"


@pytest.mark.parametrize("name", METRICS.names())
def test_every_metric_is_computed_or_left_out_with_its_line(tiny, name):
    """On a task with forget QA pairs only (no holdout, no reference model, no MUSE parts), each registered metric is
    either computed (a finite number under its key) or left out of ``evaluate_task`` with one ``absent`` line naming
    its key and the data it lacks."""
    model, tok = tiny
    task = task_of(holdout=False, metrics=[name])
    metric = METRICS[name]
    got = evaluate_task(model, tok, task, max_new_tokens=4)
    need = metric.missing(task)
    if need is None:
        assert math.isfinite(got[metric.key]) and metric.key not in got.get("absent", {})
    else:
        assert metric.key not in got
        assert got["absent"][metric.key] == f"{metric.key}: not computed, {need.why(task)}"
        assert need.why(task) in unavailable(task, [name])[0]


def test_task_metrics_equal_the_functions_they_name(tiny):
    model, tok = tiny
    task = task_of()
    ref = tiny_random("llama", vocab_size=len(tok), seed=1)
    got = task_metrics(model, tok, task, TOFU_REPORT_METRICS, reference_model=ref, k=0.4)
    pairs, hold = task.prompt.pairs(FORGET), task.prompt.pairs(HOLDOUT)
    mem = memorization_metrics(model, tok, pairs)
    mia = mia_metrics(model, tok, pairs, hold, k=0.4, gradnorm=True, reference_model=ref)
    assert got == {"extraction_strength": mem["extraction_strength"], "exact_memorization": mem["exact_memorization"],
                   **mia}
    assert list(got) == [METRICS[n].key for n in TOFU_REPORT_METRICS]  # in the order asked
    assert task_metrics(model, tok, task) == {}  # the task asks for nothing


def test_the_metrics_of_one_pass_run_it_once(tiny, monkeypatch):
    """The MIAs share one :func:`mia_metrics` call (GradNorm's backward passes only where asked for, the reference
    model only where given), and the two memorization metrics one :func:`memorization_metrics` call."""
    model, tok = tiny
    calls = []

    def spy(module, name):
        real = getattr(module, name)

        def counted(*a, **k):
            calls.append((name, k))
            return real(*a, **k)

        monkeypatch.setattr(module, name, counted)

    spy(mia_module, "mia_metrics")
    spy(memorization_module, "memorization_metrics")
    task_metrics(model, tok, task_of(), ["mia_loss", "exact_memorization", "mia_zlib", "mia_gradnorm",
                                         "extraction_strength", "mia_reference"])
    assert [n for n, _ in calls] == ["mia_metrics", "memorization_metrics"]
    assert calls[0][1]["gradnorm"] is True and calls[0][1]["reference_model"] is None
    calls.clear()
    task_metrics(model, tok, task_of(), ["mia_min_k"], k=0.4)
    assert [n for n, _ in calls] == ["mia_metrics"] and calls[0][1]["gradnorm"] is False and calls[0][1]["k"] == 0.4


def test_missing_data_leaves_metrics_out_with_a_line(tiny):
    model, tok = tiny
    no_holdout = task_of(holdout=False)
    got = task_metrics(model, tok, no_holdout, TOFU_REPORT_METRICS)
    assert set(got) == {"extraction_strength", "exact_memorization"}
    [line] = unavailable(no_holdout, TOFU_REPORT_METRICS)
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
    lacking = evaluate_task(model, tok, task_of(holdout=False, metrics=["exact_memorization", "mia_loss"]),
                            max_new_tokens=4)
    assert "exact_memorization" in lacking and "mia_auc_loss" not in lacking
    assert lacking["absent"] == {"mia_auc_loss": "mia_auc_loss: not computed, no holdout split in task 't'"}


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
