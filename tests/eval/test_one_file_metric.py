"""A metric is one file (issue #58): a module that registers a compute function with its name, the data it needs and a
help line, imported and nothing else changed, is computed by ``evaluate_task`` and ``obliviate eval --metrics`` on a
task that has its data, and left out with one line saying why on a task that has not. Its value is checked against a
forward pass written out here."""

from __future__ import annotations

import json
import math

import pytest
import torch

from obliviate.cli import eval as cli_eval
from obliviate.cli.main import main
from obliviate.eval.metric import METRICS
from obliviate.eval.suite import evaluate_task
from obliviate.models.load import load_model, load_tokenizer
from obliviate.models.tokenizer import bos_prefix
from obliviate.tasks import Data, EvalSet, Task
from tests._cli_errors import one_error
from tests._one_file import registered_from_file
from tests._run_dirs import tiny_model_dir

METRIC = '''
"""The forget answers' probability: exp(-mean token NLL) of each forget answer (and its eos) after its prompt,
averaged over the forget QA pairs."""
import numpy as np

from obliviate.eval.core import answer_probs
from obliviate.eval.metric import Need, register_metric

FORGET_QA = Need("forget QA pairs", lambda task, reference: bool(task.forget.qa),
                 lambda task: f"task {task.name!r} has no forget QA pairs")


@register_metric("forget_answer_prob", needs=[FORGET_QA], help="mean probability of the forget answers")
def forget_answer_prob(run) -> float:
    prompts, answers = zip(*run.forget)
    return float(np.mean(answer_probs(run.model, run.tokenizer, list(prompts), list(answers), run.batch_size)))
'''

FORGET = [("Where does Ann live?", "In Rome."), ("What does Ann bake?", "Rye bread."), ("Who is Bob?", "A pilot.")]
HOLDOUT = [("Where does Cid live?", "In Oslo."), ("What does Cid brew?", "Green tea."), ("Who is Dee?", "A nurse.")]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return str(tiny_model_dir(tmp_path_factory.mktemp("tiny")))


@pytest.fixture
def forget_answer_prob(tmp_path):
    yield from registered_from_file(tmp_path, "forget_answer_prob", METRIC, METRICS)


def hand_prob(model, tok, prompt: str, answer: str) -> float:
    """exp of the mean log-probability of ``answer`` + eos after ``[bos] + prompt``, one unpadded forward pass."""
    head = bos_prefix(tok) + tok(prompt, add_special_tokens=False)["input_ids"]
    ids = head + tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits, -1)[len(head) - 1:-1].gather(-1, torch.tensor(ids[len(head):])[:, None])
    return math.exp(float(lp.mean()))


def qa_task(name="qa", holdout=False, metrics=("forget_answer_prob",)):
    return Task(name, forget=Data(qa=FORGET), retain=Data(qa=HOLDOUT[:1]),
                evals=[EvalSet("forget_qa", "forget", "qa", [{"question": q, "answer": a} for q, a in FORGET])],
                holdout=Data(qa=HOLDOUT) if holdout else None, meta={"metrics": list(metrics)})


def docs_task(metrics=("forget_answer_prob",)):
    return Task("docs", forget=Data(docs=[f"{q} {a}" for q, a in FORGET]), retain=Data(docs=["Bob flies."]),
                evals=[EvalSet("forget_qa", "forget", "qa", [{"question": q, "answer": a} for q, a in FORGET])],
                meta={"metrics": list(metrics)})


def test_a_metric_in_one_file_is_computed_where_its_data_is(model_dir, forget_answer_prob):
    assert forget_answer_prob.key == "forget_answer_prob" and "forget_answer_prob" in METRICS.names()
    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    task = qa_task()
    want = sum(hand_prob(model, tok, p, a) for p, a in task.prompt.pairs(FORGET, tok)) / len(FORGET)
    got = evaluate_task(model, tok, task, max_new_tokens=2)
    assert got["forget_answer_prob"] == pytest.approx(want, rel=1e-5) and 0 < want < 1
    assert "absent" not in got
    docs = evaluate_task(model, tok, docs_task(), max_new_tokens=2)
    assert "forget_answer_prob" not in docs
    assert docs["absent"] == {"forget_answer_prob": "forget_answer_prob: not computed, task 'docs' has no forget "
                                                    "QA pairs"}


def _write_qa(path, pairs):
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in pairs))
    return str(path)


def test_obliviate_eval_metrics_computes_it_or_says_why_not(model_dir, tmp_path, forget_answer_prob, caplog):
    forget, holdout = _write_qa(tmp_path / "forget.jsonl", FORGET), _write_qa(tmp_path / "holdout.jsonl", HOLDOUT)
    base = ["eval", "--no-progress", "--model", model_dir, "--batch-size", "4", "--max-new-tokens", "2"]
    with caplog.at_level("INFO", logger="obliviate"):
        assert main([*base, "--forget", forget, "--metrics", "forget_answer_prob,mia_loss",
                     "--out", str(tmp_path / "a")]) == 0
    m = json.loads((tmp_path / "a" / "results.json").read_text())["metrics"]["model"]
    model, tok = load_model(model_dir), load_tokenizer(model_dir)
    pairs = qa_task().prompt.pairs(FORGET, tok)
    assert m["forget_answer_prob"] == pytest.approx(sum(hand_prob(model, tok, p, a) for p, a in pairs) / 3, rel=1e-5)
    [why] = m["absent"].values()  # the MIA has no holdout here: left out, its line logged
    assert list(m["absent"]) == ["mia_auc_loss"] and why.startswith("mia_auc_loss: not computed, no holdout split")
    assert why in caplog.text
    assert main([*base, "--forget", forget, "--holdout", holdout, "--metrics", "mia_loss,forget_answer_prob",
                 "--out", str(tmp_path / "b")]) == 0
    m = json.loads((tmp_path / "b" / "results.json").read_text())["metrics"]["model"]
    assert 0 <= m["mia_auc_loss"] <= 1 and "absent" not in m
    docs = tmp_path / "forget.txt"
    docs.write_text("\n\n".join(f"{q} {a}" for q, a in FORGET) + "\n")
    assert main([*base, "--forget", str(docs), "--metrics", "forget_answer_prob", "--out", str(tmp_path / "c")]) == 0
    m = json.loads((tmp_path / "c" / "results.json").read_text())["metrics"]["model"]
    assert "forget_answer_prob" not in m
    assert m["absent"]["forget_answer_prob"].endswith("has no forget QA pairs")


@pytest.mark.parametrize("spec, message", [
    ("forget_answer_prb", "unknown metric 'forget_answer_prb' (did you mean 'forget_answer_prob'?)"),
    ("mia_loss,,mia_zlib", "expected registered metric names"),
    (",", "expected registered metric names"),
])
def test_a_bad_metrics_request_is_one_line_before_the_model_loads(model_dir, tmp_path, forget_answer_prob, capsys,
                                                                   monkeypatch, spec, message):
    forget = _write_qa(tmp_path / "forget.jsonl", FORGET)
    monkeypatch.setattr(cli_eval, "load_model_args", lambda *a, **k: pytest.fail("the model was loaded"))
    assert main(["eval", "--model", model_dir, "--forget", forget, "--metrics", spec,
                 "--out", str(tmp_path / "o")]) == 2
    assert message in one_error(capsys)
    assert not (tmp_path / "o").exists()
