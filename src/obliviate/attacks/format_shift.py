"""Format-shift attack: ask the same forget knowledge in five formats.

Unlearning tuned on one format (the canonical QA pairs) often leaves the knowledge
reachable in others. Each format is scored separately:

- ``mcq_cloze``: log-likelihood of each choice text after ``qa_prompt(question)``;
- ``mcq_letters``: the lm-evaluation-harness letters format (" A".." D" after the lettered prompt);
- ``qa``: greedy answer to the canonical question, exact match (normalised) with the answer;
- ``qa_paraphrase``: greedy answer to ``question_paraphrase``, correct if it matches the
  canonical answer or ``answer_paraphrase`` (normalised);
- ``cloze``: the answer sentence is given up to the value (the ``structural`` span before the
  first ``specific`` span of ``answer_spans``) after the canonical QA prompt, and the greedy
  continuation must start with the value (normalised, whole words). The world's answers begin
  with a pronoun ("It is treated with ..."), so the question is kept as context: without it
  the prompt would not say which entity is meant.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from obliviate.data import qa_prompt
from obliviate.errors import DataError
from obliviate.eval.answers import answer_token_budget
from obliviate.eval.core import greedy_generate, mcq_accuracy, normalise_text

FORMATS = ("mcq_cloze", "mcq_letters", "qa", "qa_paraphrase", "cloze")


def cloze_parts(fact: dict) -> tuple[str, str]:
    """``(answer prefix, value)``: the answer text before its first ``specific`` span, and the value."""
    spans = fact.get("answer_spans") or []
    first = next((s for s in spans if s[2] == "specific"), None)
    if first is None:
        raise DataError(f"fact {fact.get('id', fact.get('question'))!r} has no 'specific' answer span")
    return fact["answer"][:first[0]].rstrip(), fact["value"]


def cloze_prompt(fact: dict) -> str:
    """``qa_prompt(question) + " " + answer prefix``: the model must continue with the value."""

    prefix, _ = cloze_parts(fact)
    return qa_prompt(fact["question"]) + (" " + prefix if prefix else "")


def starts_with_value(prediction: str, value: str) -> bool:
    """True if the normalised prediction's first words are the normalised value's words."""

    want = normalise_text(value).split()
    return bool(want) and normalise_text(prediction).split()[:len(want)] == want


def format_shift_attack(model, tokenizer, facts: Sequence[dict], mcqs: Sequence[dict], batch_size: int = 64) -> dict:
    """Accuracy of ``model`` on the five formats (keys :data:`FORMATS`), each in [0, 1].

    ``facts``: world facts (``question``, ``question_paraphrase``, ``answer``,
    ``answer_paraphrase``, ``value``, ``answer_spans``), e.g. ``world.facts_by_split("forget")``;
    ``mcqs``: the MCQs of the same facts, e.g. ``world.mcqs(split="forget")``.
    """

    if not facts:
        raise DataError("no facts for the format-shift attack")
    if not mcqs:
        raise DataError("no MCQs for the format-shift attack")
    out = {
        "mcq_cloze": mcq_accuracy(model, tokenizer, list(mcqs), style="cloze", batch_size=batch_size,
                                  context_fn=lambda m: qa_prompt(m["question"]))["accuracy"],
        "mcq_letters": mcq_accuracy(model, tokenizer, list(mcqs), style="letters", batch_size=batch_size)["accuracy"],
    }
    n = len(facts)
    refs = [f["answer"] for f in facts] + [f["answer_paraphrase"] for f in facts]
    prompts = [qa_prompt(f["question"]) for f in facts] + [qa_prompt(f["question_paraphrase"]) for f in facts]
    preds = greedy_generate(model, tokenizer, prompts, answer_token_budget(tokenizer, refs), batch_size)
    qa_ok = [normalise_text(p) == normalise_text(f["answer"]) for p, f in zip(preds[:n], facts)]
    para_ok = [normalise_text(p) in (normalise_text(f["answer"]), normalise_text(f["answer_paraphrase"]))
               for p, f in zip(preds[n:], facts)]
    values = [cloze_parts(f)[1] for f in facts]
    cloze_preds = greedy_generate(model, tokenizer, [cloze_prompt(f) for f in facts],
                                  answer_token_budget(tokenizer, values, slack=2), batch_size)
    out["qa"] = float(np.mean(qa_ok))
    out["qa_paraphrase"] = float(np.mean(para_ok))
    out["cloze"] = float(np.mean([starts_with_value(p, v) for p, v in zip(cloze_preds, values)]))
    return out
