"""Our lettered MCQ evaluator chooses the same option as lm-evaluation-harness (needs ``obliviate[lmeval]``)."""

import pytest
import torch

from obliviate.utils import data_dir

N_ITEMS = 10


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
    # The lm-eval task's Jinja template, rendered by hand, is our mcq_prompt (METHODS.md §6).
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


def test_mmlu_subset_parity_with_lm_eval():
    pytest.importorskip("lm_eval")
    path = data_dir() / "mmlu" / "test" / "anatomy_test.csv"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    from obliviate.benchmarks import load_mmlu
    from obliviate.eval import mcq_accuracy
    from obliviate.eval.lmeval import lmeval_mmlu_choices
    from obliviate.models.builders import tiny_llama
    from obliviate.models.tokenizer import train_tokenizer

    mcqs = load_mmlu("anatomy")[:N_ITEMS]
    texts = [m.question + " " + " ".join(m.choices) for m in load_mmlu("anatomy")] + ["Answer: A B C D"]
    tok = bos_tokenizer(train_tokenizer(texts, vocab_size=600))
    enc = tok("Answer:")["input_ids"]
    assert enc[0] == tok.bos_token_id and tok("Answer:", add_special_tokens=False)["input_ids"] == enc[1:]
    model = tiny_llama(len(tok), n_layer=2, d_model=32, n_head=2, max_len=1024, seed=1)
    with torch.no_grad():  # larger weights: the choice depends on the question (at init it is always the same letter)
        for p in model.parameters():
            if p.ndim == 2:
                p.mul_(10.0)

    ours = mcq_accuracy(model, tok, mcqs, style="letters")
    assert len(set(ours["predictions"])) > 1  # a constant answer would make the comparison trivial
    top2 = [sorted(s)[-1] - sorted(s)[-2] for s in ours["scores"]]
    assert min(top2) > 1e-3  # no near-ties that numerical noise could flip
    theirs = lmeval_mmlu_choices(model, tok, path, limit=N_ITEMS)
    assert len(theirs) == N_ITEMS
    assert ours["predictions"] == theirs
