"""Our lettered MCQ evaluator chooses the same option as lm-evaluation-harness (needs ``obliviate[lmeval]``)."""

import pytest
import torch

from obliviate.utils import data_dir

N_ITEMS = 10
N_WMDP = 40


def test_lmeval_missing_is_a_clear_error(monkeypatch, tiny_model, tiny_tokenizer):
    import builtins

    from obliviate.errors import ObliviateError
    from obliviate.eval.lmeval import lmeval_model

    real_import = builtins.__import__

    def no_lm_eval(name, *a, **kw):
        if name == "lm_eval" or name.startswith("lm_eval."):
            raise ImportError(name)
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_lm_eval)
    with pytest.raises(ObliviateError, match=r"pip install 'obliviate\[lmeval\]'"):
        lmeval_model(tiny_model, tiny_tokenizer)


def test_task_yaml_prompt_matches_ours():
    # The lm-eval task's Jinja template, rendered by hand, is our mcq_prompt (docs/methods.md).
    import json

    from obliviate.eval import mcq_prompt
    from obliviate.eval.lmeval import _task_yaml

    text = _task_yaml("t", "/x/data.jsonl", 4)
    line = next(l for l in text.splitlines() if l.startswith("doc_to_text: "))
    template = json.loads(line[len("doc_to_text: "):])
    q, choices = "  What is it? ", ["one", "two", "three", "four"]
    rendered = template.replace("{{question.strip()}}", q.strip())
    for i, c in enumerate(choices):
        rendered = rendered.replace(f"{{{{choices[{i}]}}}}", c)
    assert rendered == mcq_prompt(q, choices)
    assert 'doc_to_choice: ["A", "B", "C", "D"]' in text


def bos_tokenizer(tok):
    """``tok`` whose post-processor prepends bos when special tokens are requested (as lm-eval asks)."""
    from tokenizers import processors

    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{tok.bos_token} $A", pair=f"{tok.bos_token} $A $B", special_tokens=[(tok.bos_token, tok.bos_token_id)])
    return tok


def _scaled_model(texts, seed=1):
    """A tiny Llama with a bos-prepending tokenizer trained on ``texts``, with weights large enough that its
    choice depends on the question (at init it is always the same letter)."""
    from obliviate.models.builders import tiny_llama
    from obliviate.models.tokenizer import train_tokenizer

    tok = bos_tokenizer(train_tokenizer(texts + ["Answer: A B C D"], vocab_size=600))
    enc = tok("Answer:")["input_ids"]
    assert enc[0] == tok.bos_token_id and tok("Answer:", add_special_tokens=False)["input_ids"] == enc[1:]
    model = tiny_llama(len(tok), n_layer=2, d_model=32, n_head=2, max_len=1024, seed=seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(10.0)
    return model, tok


def _check_parity(model, tok, mcqs, theirs):
    from obliviate.eval import mcq_accuracy

    ours = mcq_accuracy(model, tok, mcqs, style="letters")
    assert len(set(ours["predictions"])) > 1  # a constant answer would make the comparison trivial
    top2 = [sorted(s)[-1] - sorted(s)[-2] for s in ours["scores"]]
    assert min(top2) > 1e-3  # no near-ties that numerical noise could flip
    assert len(theirs) == len(mcqs)
    assert ours["predictions"] == theirs  # item by item
    answers = [m["answer_index"] if isinstance(m, dict) else m.answer_index for m in mcqs]
    assert ours["accuracy"] == pytest.approx(sum(t == a for t, a in zip(theirs, answers)) / len(mcqs))
    return ours


def _benchmark_items(name, limit):
    """The benchmark task's MCQs as ``eval --benchmark`` scores them (with lm-eval's description)."""
    from obliviate.tasks.benchmark import benchmark_task

    es = benchmark_task(name, limit=limit).evals[0]
    return [{"question": m.question, "choices": list(m.choices), "answer_index": m.answer_index,
             "description": m.meta.get("description", "")} for m in es.items]


@pytest.mark.heavy(7)
def test_mmlu_subset_parity_with_lm_eval_installed_task():
    # lm-eval's own mmlu_anatomy (its YAML: description, prompt, letters) on the local CSV's records
    pytest.importorskip("lm_eval")
    path = data_dir() / "mmlu" / "test" / "anatomy_test.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from obliviate.eval.lmeval import lmeval_installed_task_choices
    from obliviate.tasks.sources import load_mmlu

    mcqs = _benchmark_items("mmlu:anatomy", N_ITEMS)
    assert mcqs[0]["description"] == "The following are multiple choice questions (with answers) about anatomy.\n\n"
    docs = [{"question": m["question"], "subject": "anatomy", "choices": m["choices"], "answer": m["answer_index"]}
            for m in mcqs]
    model, tok = _scaled_model([m.question + " " + " ".join(m.choices) for m in load_mmlu("anatomy")])
    _check_parity(model, tok, mcqs, lmeval_installed_task_choices(model, tok, "mmlu_anatomy", docs))


@pytest.mark.heavy(2)
def test_wmdp_bio_parity_with_lm_eval_installed_task():
    # Issue #28: on 40 WMDP items our old prompt (no description) and lm-eval's wmdp_bio disagreed on 14.
    pytest.importorskip("lm_eval")
    if not (data_dir() / "wmdp" / "bio_questions.json").is_file():
        pytest.skip("local WMDP questions not present")
    from obliviate.eval import mcq_accuracy
    from obliviate.eval.lmeval import lmeval_installed_task_choices
    from obliviate.eval.suite import evaluate_benchmark
    from obliviate.tasks.sources import load_wmdp

    all_items = load_wmdp("bio")
    mcqs = _benchmark_items("wmdp_bio", N_WMDP)
    docs = [{"question": m["question"], "choices": m["choices"], "answer": m["answer_index"]} for m in mcqs]
    model, tok = _scaled_model([m.question + " " + " ".join(m.choices) for m in all_items[:200]], seed=2)
    theirs = lmeval_installed_task_choices(model, tok, "wmdp_bio", docs)
    ours = _check_parity(model, tok, mcqs, theirs)
    run = evaluate_benchmark(model, tok, "wmdp_bio", limit=N_WMDP)  # what `obliviate eval --benchmark` runs
    assert run["_per_item"]["wmdp_bio"]["predictions"] == theirs
    assert run["wmdp_bio_acc"] == pytest.approx(ours["accuracy"])
    # the description matters: without it, some predictions differ (the parity is not engine-only)
    bare = mcq_accuracy(model, tok, [{**m, "description": ""} for m in mcqs], style="letters")["predictions"]
    assert bare != theirs


@pytest.mark.heavy(12)
def test_eval_lm_eval_runs_a_local_task_yaml(tmp_path):
    pytest.importorskip("lm_eval")
    import json

    from obliviate.cli.main import main
    from obliviate.eval.lmeval import _task_yaml
    from obliviate.models.load import save_model

    items = [{"question": f"Which number is {i}?", "choices": [str(i), str(i + 1), str(i + 2), str(i + 3)],
              "answer": 0} for i in range(6)]
    data = tmp_path / "tasks" / "numbers.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(x) + "\n" for x in items))
    (tmp_path / "tasks" / "my_numbers.yaml").write_text(_task_yaml("my_numbers", data, 4))
    model, tok = _scaled_model([x["question"] + " " + " ".join(x["choices"]) for x in items])
    save_model(model, tmp_path / "m")
    tok.save_pretrained(str(tmp_path / "m"))
    rc = main(["eval", "--model", str(tmp_path / "m"), "--lm-eval", "my_numbers", "--lm-eval-include",
               str(tmp_path / "tasks"), "--out", str(tmp_path / "out")])
    assert rc in (0, None)
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    acc = res["metrics"]["lm_eval"]["my_numbers"]["acc"]
    from obliviate.eval import mcq_accuracy
    ours = mcq_accuracy(model, tok, [{**x, "answer_index": 0} for x in items], style="letters")["accuracy"]
    assert acc == pytest.approx(ours)
    assert main(["eval", "--model", str(tmp_path / "m"), "--lm-eval", "no_such_task", "--lm-eval-include",
                 str(tmp_path / "tasks"), "--out", str(tmp_path / "out2")]) == 2
