"""Evaluate an in-memory model on a public benchmark or a user's JSONL (docs/methods.md).

- **MCQ** benchmarks (WMDP, MMLU, MedMCQA, ``--kind mcq`` files): zero-shot accuracy by
  log-likelihood in the lm-evaluation-harness format (:func:`obliviate.eval.mcq_accuracy`
  with ``style="letters"``: ``{question}\\nA. ...\\nB. ...\\nAnswer:``, scoring `` A``, `` B``, ...).
  Reported: ``accuracy``, ``chance`` (mean 1/#choices), ``n``.
- **QA** benchmarks (TOFU splits, ``--kind qa`` files): greedy answers after the TOFU prompt
  ``Question: {q}\\nAnswer:`` (:func:`obliviate.tasks.tofu.tofu_prompt`), cut at the first
  newline; ``exact_match`` (normalised) and ``rouge_l`` (ROUGE-L recall), plus the TOFU
  probability ``prob``: mean P~(answer|q) = exp(-mean answer-token NLL), or, where the
  examples carry ``options`` (TOFU real_authors / world_facts), the normalised
  P(correct) / (P(correct) + sum P(wrong)).
- **Text** sets (RealToxicityPrompts) are prompts, not an accuracy benchmark: a
  :class:`ConfigError` points to toxicity evaluation (:func:`obliviate.eval.toxicity.continuation_toxicity`).

Per-example predictions are returned under ``per_example`` (keep them out of results.json).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from obliviate.tasks.sources import load_jsonl
from obliviate.tasks.sources.benchmarks import benchmark_kind, get_benchmark
from obliviate.errors import ConfigError, DataError
from obliviate.eval.core import mcq_accuracy, qa_accuracy
from obliviate.eval.tofu import answer_nll, normalised_choice_prob
from obliviate.tasks.tofu import tofu_prompt

KINDS = ("qa", "mcq")


def load_benchmark_examples(name: str | None = None, *, data: str | os.PathLike | None = None,
                            kind: str | None = None, mapping: dict | str | None = None,
                            limit: int | None = None, **loader_kw) -> tuple[str, str, list]:
    """``(name, kind, examples)`` of a registered benchmark ``name`` or of a user file ``data``.

    With ``data``, ``kind`` (qa or mcq) is required and ``mapping`` maps schema fields to the
    file's fields (see :func:`obliviate.tasks.sources.load_jsonl`); ``name`` defaults to the file stem.
    ``limit`` keeps the first ``limit`` examples (in file order); a JSON Lines, CSV or text ``data`` file
    is read no further.
    """

    if limit is not None and limit < 1:
        raise ConfigError(f"limit={limit} must be a positive number of examples")
    if data is not None:
        if kind is None:
            raise ConfigError(f"--data {data} needs --kind ({' or '.join(KINDS)})")
        if kind not in KINDS:
            raise ConfigError(f"--kind {kind!r} cannot be evaluated (valid: {', '.join(KINDS)})")
        examples = load_jsonl(data, kind=kind, mapping=mapping, limit=limit)  # read no further than limit
        name = name or Path(data).stem
    else:
        if not name:
            raise ConfigError("no benchmark given: pass a benchmark name or a data file")
        if kind is not None or mapping:
            raise ConfigError("--kind and --mapping apply to a user file given with --data, not to a named benchmark")
        kind = benchmark_kind(name)
        if kind == "text":
            raise ConfigError(f"benchmark {name!r} is a set of text prompts, not an accuracy benchmark: "
                              "evaluate toxicity of continuations instead (obliviate.eval.toxicity.continuation_toxicity)")
        examples = get_benchmark(name, **loader_kw)
    if limit is not None:
        examples = examples[:limit]
    if not examples:
        raise DataError(f"benchmark {name!r} has no examples")
    return name, kind, examples


def evaluate_mcq(model, tokenizer, examples, batch_size: int = 32) -> dict:
    """Zero-shot lettered MCQ accuracy (lm-eval format) with chance and per-example predictions."""

    res = mcq_accuracy(model, tokenizer, examples, style="letters", batch_size=batch_size)
    return {"accuracy": res["accuracy"], "chance": float(np.mean([1.0 / len(m["choices"]) for m in examples])),
            "n": res["n"],
            "per_example": {"prediction": res["predictions"], "answer_index": [m["answer_index"] for m in examples],
                            "correct": res["correct"]}}


def evaluate_qa(model, tokenizer, examples, batch_size: int = 32, max_new_tokens: int = 64) -> dict:
    """Greedy exact match and ROUGE-L recall after the TOFU prompt, and the TOFU probability."""

    qs = [ex["question"] for ex in examples]
    answers = [ex["answer"] for ex in examples]
    res = qa_accuracy(model, tokenizer, qs, answers, prompt_fn=tofu_prompt, max_new_tokens=max_new_tokens,
                      batch_size=batch_size)
    with_options = all(ex.get("options") for ex in examples)
    if with_options:  # TOFU real_authors / world_facts: P(correct) normalised over the four options
        wrong = [[o for o in ex["options"] if o != ex["answer"]] for ex in examples]
        flat_q = qs + [q for q, w in zip(qs, wrong) for _ in w]
        flat_a = answers + [a for w in wrong for a in w]
        p = np.exp(-answer_nll(model, tokenizer, flat_q, flat_a, batch_size=batch_size, cut=True))
        sizes = np.cumsum([len(w) for w in wrong])[:-1]
        per = normalised_choice_prob(p[:len(qs)], np.split(p[len(qs):], sizes))
    else:
        per = np.exp(-answer_nll(model, tokenizer, qs, answers, batch_size=batch_size, cut=True))
    return {"exact_match": res["exact_match"], "rouge_l": res["rouge_l"], "prob": float(np.mean(per)),
            "prob_kind": "normalised_over_options" if with_options else "answer", "n": res["n"],
            "per_example": {"prediction": res["predictions"], "answer": answers, "correct": res["correct"],
                            "prob": [float(x) for x in per]}}


def evaluate_benchmark(model, tokenizer, name: str | None = None, limit: int | None = None, *,
                       data: str | os.PathLike | None = None, kind: str | None = None,
                       mapping: dict | str | None = None, batch_size: int = 32, max_new_tokens: int = 64,
                       **loader_kw) -> dict:
    """Evaluate ``model`` on benchmark ``name`` (see :func:`obliviate.tasks.sources.benchmarks.benchmark_names`)
    or on the user file ``data`` (with ``kind`` and ``mapping``).

    ``loader_kw`` goes to the loader (``root=``, ``allow_hub=``). Returns the metrics of
    :func:`evaluate_mcq` or :func:`evaluate_qa` plus ``benchmark`` and ``kind``.
    """
    name, kind, examples = load_benchmark_examples(name, data=data, kind=kind, mapping=mapping, limit=limit,
                                                   **loader_kw)
    return {"benchmark": name, "kind": kind,
            **evaluate_examples(model, tokenizer, kind, examples, batch_size=batch_size, max_new_tokens=max_new_tokens)}


def evaluate_examples(model, tokenizer, kind: str, examples, batch_size: int = 32, max_new_tokens: int = 64) -> dict:
    """:func:`evaluate_mcq` or :func:`evaluate_qa` by ``kind``."""
    if kind == "mcq":
        return evaluate_mcq(model, tokenizer, examples, batch_size=batch_size)
    if kind == "qa":
        return evaluate_qa(model, tokenizer, examples, batch_size=batch_size, max_new_tokens=max_new_tokens)
    raise ConfigError(f"cannot evaluate examples of kind {kind!r} (valid: {', '.join(KINDS)})")
