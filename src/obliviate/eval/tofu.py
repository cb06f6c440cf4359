"""TOFU metrics (Maini et al. 2024): answer probability, ROUGE-L recall, truth ratio, forget quality (a KS
test against a retain-only model) and model utility (the harmonic mean of nine numbers); definitions in
docs/tofu.md, "Definitions".

:func:`tofu_metrics`, the TOFU report, adds what OpenUnlearning's ``eval=tofu`` adds
(:data:`TOFU_REPORT_METRICS`): extraction strength and exact memorization on the forget split, and the six
MIAs, forget split against TOFU's holdout split (Min-K% and Min-K%++ at k = 0.4, its configs' value; the
reference model of ``mia_reference`` is the retain model), where a holdout split and a reference are at hand
(:func:`report_notes` says which not).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

from obliviate.data import clip_chars, collate, encode_prompt_answer
from obliviate.errors import ConfigError, DataError
from obliviate.eval.core import (answer_mean_nll, fit_context, greedy_generate, harmonic_mean,
                                 model_max_length,
                                 rouge_l_recall)
from obliviate.eval.metric import unavailable
from obliviate.eval.suite import task_metrics
from obliviate.models.layers import evaluating
from obliviate.models.tokenizer import pad_id
from obliviate.tasks.base import Task
from obliviate.tasks.tofu import tofu_answer, tofu_prompt

UTILITY_SETS = ("retain", "real_authors", "world_facts")
UTILITY_METRICS = ("prob", "rouge_l", "truth_ratio")
UTILITY_KEYS = tuple(f"{s}_{m}" for s in UTILITY_SETS for m in UTILITY_METRICS)
"""The 9 components of model utility, as named in :func:`tofu_eval`'s result."""
TOFU_SETS = ("forget", "retain", "real_authors", "world_facts")
"""The four perturbed sets of a ``tofu:<forget>`` task (its ``meta["perturbed"]``), in :func:`tofu_eval`'s
order."""
TOFU_REPORT_METRICS = ("extraction_strength", "exact_memorization", "mia_loss", "mia_zlib", "mia_min_k",
                       "mia_min_k_plus_plus", "mia_gradnorm", "mia_reference")
"""The registered metrics (:data:`obliviate.eval.metric.METRICS`) the TOFU report adds, OpenUnlearning's
``eval=tofu`` metrics beyond TOFU's own: extraction strength, exact memorization and its six MIAs
(``configs/eval/tofu.yaml``; its ``mia_reference`` is commented out there for want of a reference model path,
which the protocol has: the retain model)."""
TOFU_MIA_K = 0.4
"""k of Min-K% and Min-K%++ in the TOFU report: OpenUnlearning's ``mia_min_k.yaml`` and
``mia_min_k_plus_plus.yaml``."""


# ------------------------------------------------------------------ model-level scores

@torch.no_grad()
@evaluating
def answer_nll(model, tokenizer, questions: Sequence[str], answers: Sequence[str], batch_size: int = 32,
               max_len: int | None = None, prompt_fn: Callable[[str], str] = tofu_prompt,
               cut: bool = False) -> np.ndarray:
    """Mean token NLL L(a|q) of each answer (its tokens and the eos) given ``prompt_fn(q)``: shape (N,).

    ``[bos] + prompt + " answer" + [eos]`` longer than ``max_len`` (default: the model's
    ``max_position_embeddings``) raises :class:`DataError` instead of being truncated; with ``cut``
    (evaluation of a user's file) the prompt is cut from the left instead, keeping bos, with one warning.
    """
    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} questions but {len(answers)} answers")
    if not questions:
        return np.zeros(0)
    if max_len is None:
        max_len = getattr(model.config, "max_position_embeddings", None) or 2048
    prompts = [prompt_fn(q) for q in questions]
    clipped = [clip_chars(p, max_len) for p in prompts]  # a 50 MB question is not tokenised whole
    seqs, masks = encode_prompt_answer(tokenizer, clipped, [clip_chars(tofu_answer(a), max_len, "start")
                                                            for a in answers], max_len=10**9)
    n_cut = 0
    for i, (s, m) in enumerate(zip(seqs, masks)):
        if len(s) > max_len or len(clipped[i]) < len(prompts[i]):
            if not cut:
                at_least = "at least " if len(clipped[i]) < len(prompts[i]) else ""
                raise DataError(f"example {i + 1}: prompt + answer is {at_least}{len(s)} "
                                f"tokens, longer than max_len={max_len}")
            p_ids, a_ids, _ = fit_context(s[m == 0].tolist(), s[m == 1].tolist(), max_len,
                                          tokenizer.bos_token_id)
            seqs[i], masks[i] = np.asarray(p_ids + a_ids), np.asarray([0] * len(p_ids) + [1] * len(a_ids))
            n_cut += 1
        if masks[i].sum() == 0:
            raise DataError(f"example {i + 1}: the answer has no tokens")
    if n_cut:
        warnings.warn(f"answer_nll: {n_cut} of {len(prompts)} prompts were cut from the left so that prompt "
                      f"+ answer fits the model's {max_len} positions", stacklevel=2)
    pad = pad_id(tokenizer)
    dev = next(model.parameters()).device
    order = np.argsort([len(s) for s in seqs], kind="stable")  # similar lengths together: less padding
    out = np.zeros(len(seqs))
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = collate([seqs[i] for i in idx], pad, label_mask=[masks[i] for i in idx])
        batch = {k: v.to(dev) for k, v in batch.items()}
        out[idx] = answer_mean_nll(model, batch, "answer NLL").cpu().numpy()
    return out


def answer_prob(model, tokenizer, questions: Sequence[str], answers: Sequence[str], **kw) -> np.ndarray:
    """P~(a|q) = exp(-mean token NLL of a given q) for each pair: shape (N,). ``kw`` as :func:`answer_nll`."""
    return np.exp(-answer_nll(model, tokenizer, questions, answers, **kw))


def model_truth_ratio(model, tokenizer, questions: Sequence[str], paraphrased_answers: Sequence[str],
                      perturbed_answers: Sequence[Sequence[str]], **kw) -> np.ndarray:
    """Truth ratio R of each question under ``model`` (see :func:`truth_ratio`): shape (N,)."""
    if not len(questions) == len(paraphrased_answers) == len(perturbed_answers):
        raise ValueError("questions, paraphrased_answers and perturbed_answers must have the same length")
    flat_q, flat_a = list(questions), list(paraphrased_answers)
    for q, wrong in zip(questions, perturbed_answers):
        flat_q.extend([q] * len(wrong))
        flat_a.extend(wrong)
    nll = answer_nll(model, tokenizer, flat_q, flat_a, **kw)
    para, rest = nll[:len(questions)], nll[len(questions):]
    return truth_ratio(para, _split(rest, [len(w) for w in perturbed_answers]))


# ------------------------------------------------------------------ pure functions

def truth_ratio(para_losses, perturbed_losses) -> np.ndarray:
    """R_i = exp(L_para_i - mean_j L_pert_ij) = geometric-mean P~(perturbed) / P~(paraphrased).

    ``para_losses``: (N,) mean-token NLLs; ``perturbed_losses``: (N, K) or a list of N
    non-empty sequences (K may vary per question).
    """
    para = np.asarray(para_losses, dtype=float).reshape(-1)
    if len(perturbed_losses) != len(para):
        raise ValueError(f"{len(para)} paraphrased losses but "
                         f"{len(perturbed_losses)} rows of perturbed losses")
    if any(len(row) == 0 for row in perturbed_losses):
        raise ValueError("every question needs at least one perturbed loss")
    pert_mean = np.array([np.mean(np.asarray(row, dtype=float)) for row in perturbed_losses])
    return np.exp(para - pert_mean)


def truth_ratio_score(ratios) -> float:
    """Retain-side truth-ratio score: mean max(0, 1 - R) (1 = always prefers the true answer)."""
    r = np.asarray(ratios, dtype=float)
    return float(np.mean(np.maximum(0.0, 1.0 - r)))


def forget_truth_ratio_score(ratios) -> float:
    """Forget-side truth-ratio statistic as TOFU reports it: mean min(R, 1/R) (1 = no preference)."""
    r = np.asarray(ratios, dtype=float)
    with np.errstate(divide="ignore"):
        return float(np.mean(np.minimum(r, 1.0 / r)))


def forget_quality(tr_unlearned, tr_retain_model) -> float:
    """p-value of the two-sample KS test between the two models' forget-set truth ratios."""
    from scipy.stats import ks_2samp

    a, b = np.asarray(tr_unlearned, dtype=float), np.asarray(tr_retain_model, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("forget_quality needs non-empty truth-ratio samples")
    return float(ks_2samp(a, b).pvalue)


def normalised_choice_prob(correct_prob, wrong_probs):
    """P(correct) / (P(correct) + sum P(wrong)).

    Scalar ``correct_prob`` with a sequence ``wrong_probs`` -> float; (N,) with (N, K) or
    a list of N sequences -> (N,) array.
    """
    if np.ndim(correct_prob) == 0:
        p = float(correct_prob)
        return p / (p + float(np.sum(wrong_probs)))
    p = np.asarray(correct_prob, dtype=float)
    wrong_sum = np.array([np.sum(np.asarray(row, dtype=float)) for row in wrong_probs])
    return p / (p + wrong_sum)


def retain_utility(values: dict) -> float:
    """Harmonic mean of the 3 retain-set terms of model utility (``retain_prob``, ``retain_rouge_l``,
    ``retain_truth_ratio``), labelled as such: not TOFU's model utility. A model trained from scratch on
    TOFU alone knows no real authors or world facts, so their 6 terms are ~0 and model utility collapses
    to ~0 for every model; this term still ranks methods on what they keep of the retain set."""
    return harmonic_mean([float(values[f"retain_{m}"]) for m in UTILITY_METRICS])


TINY_SCALE_NOTE = ("tiny models trained from scratch on TOFU: model_utility is ~0 for every model (they know "
                   "no real authors or world facts, so the harmonic mean collapses) and forget_quality is ~0 "
                   "for every method at this scale; compare retain_utility (retain-set terms only) and the "
                   "forget ROUGE-L / probability instead. With --model and --retain-model (real fine-tuned "
                   "models) all numbers are TOFU's.")
"""What the tiny-model TOFU protocol's numbers mean, written into its results and reports."""


def model_utility(values: dict) -> float:
    """Harmonic mean of the 9 numbers ``values[k]`` for k in :data:`UTILITY_KEYS` (other keys ignored)."""
    missing = [k for k in UTILITY_KEYS if k not in values]
    if missing:
        raise ConfigError(f"model_utility is missing {', '.join(missing)} (needs {', '.join(UTILITY_KEYS)})")
    return harmonic_mean([float(values[k]) for k in UTILITY_KEYS])


# ------------------------------------------------------------------ full evaluation

def _get(ex, key: str):
    return ex.get(key) if hasattr(ex, "get") else getattr(ex, key, None)


def _split(flat: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(sizes)[:-1]) if sizes else []


def _wrong_answers(ex, name: str, i: int) -> list[str]:
    wrong = _get(ex, "perturbed_answers")
    if not wrong and _get(ex, "options"):
        wrong = [o for o in _get(ex, "options") if o != _get(ex, "answer")]
    if not wrong:
        raise DataError(f"{name} example {i + 1} has no perturbed_answers "
                        "(or options); use a TOFU *_perturbed split")
    return list(wrong)


def _set_losses(model, tokenizer, examples, name: str, paraphrased: bool, **kw) -> dict:
    """L(answer), L(base answer) and L(each wrong answer) for every example, in one batched pass."""
    if not examples:
        raise DataError(f"TOFU {name} set is empty")
    qs = [_get(ex, "question") for ex in examples]
    answers = [_get(ex, "answer") for ex in examples]
    if paraphrased:
        base = [_get(ex, "paraphrased_answer") for ex in examples]
        bad = next((i for i, b in enumerate(base) if not b), None)
        if bad is not None:
            raise DataError(f"{name} example {bad + 1} has no "
                            "paraphrased_answer; use a TOFU *_perturbed split")
    else:
        base = answers
    wrong = [_wrong_answers(ex, name, i) for i, ex in enumerate(examples)]
    flat_q = qs + (qs if paraphrased else []) + [q for q, w in zip(qs, wrong) for _ in w]
    flat_a = answers + (base if paraphrased else []) + [a for w in wrong for a in w]
    nll = answer_nll(model, tokenizer, flat_q, flat_a, **kw)
    n = len(qs)
    gt = nll[:n]
    base_nll = nll[n:2 * n] if paraphrased else gt
    rest = nll[2 * n:] if paraphrased else nll[n:]
    return {"question": qs, "answer": answers, "gt": gt, "base": base_nll,
            "wrong": _split(rest, [len(w) for w in wrong])}


TOFU_MAX_NEW_TOKENS = 200
"""Greedy tokens per answer for ROUGE-L, as TOFU's and OpenUnlearning's generation settings
(``max_new_tokens`` 200): a smaller budget cuts the longest answers and lowers their ROUGE-L. A model with
fewer than 400 positions generates at most half its context, so that a prompt still fits."""


def tofu_eval(model, tokenizer, forget_set, retain_set, real_authors, world_facts,
              retain_model_truth_ratios=None, batch_size: int = 32, max_new_tokens: int = TOFU_MAX_NEW_TOKENS,
              max_len: int | None = None) -> dict:
    """All TOFU metrics for ``model``.

    ``forget_set`` / ``retain_set``: examples with ``paraphrased_answer`` and ``perturbed_answers``
    (e.g. ``load_tofu("forget10_perturbed")``, ``load_tofu("retain_perturbed")``);
    ``real_authors`` / ``world_facts``: examples with ``perturbed_answers`` or ``options``.
    Examples may be :class:`~obliviate.tasks.sources.QAExample` or dicts with those keys.
    ``retain_model_truth_ratios``: ``result["per_example"]["forget_truth_ratio"]`` of a
    retain-only model on the same forget set; if given, ``forget_quality`` is reported.

    Returns ``forget_prob``, ``forget_rouge_l``, ``forget_truth_ratio`` (mean min(R, 1/R)),
    ``forget_quality`` (if a reference is given), the 9 :data:`UTILITY_KEYS`,
    ``model_utility``, and ``per_example`` (forget-set truth ratios and greedy answers).
    """
    kw = {"batch_size": batch_size, "max_len": max_len}
    ctx = model_max_length(model)
    # room for a prompt
    max_new_tokens = max_new_tokens if ctx is None else max(1, min(max_new_tokens, ctx // 2))
    res: dict = {}
    per_example: dict = {}
    for name, examples, paraphrased in (("forget", forget_set, True), ("retain", retain_set, True),
                                        ("real_authors", real_authors, False),
                                        ("world_facts", world_facts, False)):
        s = _set_losses(model, tokenizer, examples, name, paraphrased, **kw)
        ratios = truth_ratio(s["base"], s["wrong"])
        if paraphrased:
            prob = float(np.mean(np.exp(-s["gt"])))
        else:
            prob = float(np.mean(normalised_choice_prob(np.exp(-s["gt"]), [np.exp(-w) for w in s["wrong"]])))
        preds = greedy_generate(model, tokenizer, [tofu_prompt(q) for q in s["question"]],
                                max_new_tokens=max_new_tokens, batch_size=batch_size)
        res[f"{name}_prob"] = prob
        res[f"{name}_rouge_l"] = float(np.mean([rouge_l_recall(p, a) for p, a in zip(preds, s["answer"])]))
        if name == "forget":
            res["forget_truth_ratio"] = forget_truth_ratio_score(ratios)
            per_example["forget_truth_ratio"] = ratios.tolist()
            per_example["forget_predictions"] = preds
            if retain_model_truth_ratios is not None:
                res["forget_quality"] = forget_quality(ratios, retain_model_truth_ratios)
        else:
            res[f"{name}_truth_ratio"] = truth_ratio_score(ratios)
    res["model_utility"] = model_utility(res)
    res["retain_utility"] = retain_utility(res)
    res["per_example"] = per_example
    return res


def tofu_metrics(model, tokenizer, task: Task, retain_truth_ratios=None, batch_size: int = 32,
                 max_new_tokens: int = TOFU_MAX_NEW_TOKENS, max_len: int | None = None,
                 reference_model=None) -> dict:
    """The TOFU metric set of ``model`` on a ``tofu:<forget>`` task (:func:`obliviate.tasks.tofu.tofu_task`):
    :func:`tofu_eval` on the task's four perturbed sets (``task.meta["perturbed"]``), plus
    ``<forget>_rouge_l`` (e.g. ``forget10_rouge_l``) = ``forget_rouge_l``, and :data:`TOFU_REPORT_METRICS`
    (:func:`obliviate.eval.suite.task_metrics`): ``extraction_strength``, ``exact_memorization`` and, where
    the task has its holdout split, ``mia_auc_{loss,zlib,min_k,min_k_plus_plus,gradnorm}`` (k =
    :data:`TOFU_MIA_K`), with ``reference_model`` (the retain model) ``mia_auc_reference`` too. What is left
    out: :func:`report_notes`.

    ``retain_truth_ratios``: the retain-only model's ``per_example["forget_truth_ratio"]`` on the same task;
    with it, ``forget_quality`` is reported.
    """
    perturbed = task.meta.get("perturbed")
    if not isinstance(perturbed, dict) or any(k not in perturbed for k in TOFU_SETS):
        raise ConfigError("the TOFU metrics need a tofu:<forget> task (its perturbed sets "
                          f"{', '.join(TOFU_SETS)}); task {task.name!r} has none")
    res = tofu_eval(model, tokenizer, *(perturbed[k] for k in TOFU_SETS),
                    retain_model_truth_ratios=retain_truth_ratios,
                    batch_size=batch_size, max_new_tokens=max_new_tokens, max_len=max_len)
    res[f"{task.meta['split']}_rouge_l"] = res["forget_rouge_l"]
    res.update(task_metrics(model, tokenizer, task, TOFU_REPORT_METRICS, reference_model=reference_model,
                            batch_size=batch_size, k=TOFU_MIA_K))
    return res


def report_notes(task: Task, reference: bool = True) -> list[str]:
    """One line per part of :data:`TOFU_REPORT_METRICS` the TOFU report of ``task`` leaves out, and why: no
    holdout split (naming the file looked for), or (``reference`` False) no reference model."""
    return unavailable(task, TOFU_REPORT_METRICS, reference=reference)
