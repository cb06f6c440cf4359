"""MUSE's six-way evaluation (Shi et al. 2024, "MUSE: Machine Unlearning Six-Way Evaluation for Language
Models", arXiv:2407.06460), as muse_bench (swj0419/muse_bench, ``eval.py`` and ``metrics/``) computes it.

The first four criteria are registered metrics (:data:`MODEL_METRICS`), fractions (MUSE's tables print them x
100): ``muse_verbmem_f`` (ROUGE-L F1 of greedy continuations of forget prompts), ``muse_knowmem_f`` /
``muse_knowmem_r`` (ROUGE-L F1 of in-context QA answers on forget / retain questions) and ``muse_mia_auc``
(Min-40%, for the PrivLeak, :func:`muse_privleak`). Scalability and sustainability are the same metrics after
growing or sequential forget sets, run by :func:`obliviate.pipelines.sequential.over_requests`. Prompts,
budgets and cuts: docs/evaluation.md, "MUSE six-way evaluation".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from obliviate.errors import DataError
from obliviate.eval.core import greedy_generate, lcs_length, model_max_length
from obliviate.eval.metric import MetricRun, Need, register_metric
from obliviate.eval.mia import mia_metrics, priv_leak
from obliviate.models.tokenizer import bos_prefix
from obliviate.tasks.base import Task

VERBMEM_MAX_NEW_TOKENS = 128
"""muse_bench ``eval_model(verbmem_max_new_tokens=128)``."""
KNOWMEM_MAX_NEW_TOKENS = 32
"""muse_bench ``eval_model(knowmem_max_new_tokens=32)``."""
KNOWMEM_STOPS = ("\n\n", "\nQuestion", "Question:")
"""muse_bench's knowmem answer is cut before each of these, in this order."""
MUSE_MIA_K = 0.4
"""PrivLeak's score: ``forget_holdout_Min-40%``."""
TABLE = ("muse_verbmem_f", "muse_knowmem_f", "muse_privleak", "muse_knowmem_r")
"""MUSE's table, in its column order: VerbMem on D_f (lower is better), KnowMem on D_f (lower), PrivLeak (near
0), KnowMem on D_r (higher)."""


# ------------------------------------------------------------------ ROUGE-L F1 as muse_bench scores it

def rouge_words(text: str) -> list[str]:
    """rouge-score's tokens without a stemmer: lower-cased, every run of characters other than a-z and 0-9 a
    separator."""
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def rouge_l_f1(prediction: str, reference: str) -> float:
    """ROUGE-L F1 = 2 P R / (P + R) with P = LCS / |prediction|, R = LCS / |reference| on :func:`rouge_words`
    (rouge-score's ``RougeScorer(["rougeL"], use_stemmer=False).score(reference, prediction).fmeasure``,
    MUSE's ``rougeL``); 0 when either side has no word or they share none."""
    pred, ref = rouge_words(prediction), rouge_words(reference)
    lcs = lcs_length(pred, ref)
    if not lcs:
        return 0.0
    p, r = lcs / len(pred), lcs / len(ref)
    return 2 * p * r / (p + r)


# ------------------------------------------------------------------ prompts and budgets

def knowmem_prompt(question: str, icl: Sequence[dict]) -> str:
    """muse_bench's few-shot prompt: each in-context pair as ``Question: q\\nAnswer: a\\n\\n``, then the
    question."""
    shots = "".join(f"Question: {x['question']}\nAnswer: {x['answer']}\n\n" for x in icl)
    return shots + f"Question: {question}\nAnswer: "


def cut_answer(output: str) -> str:
    """The answer before the first :data:`KNOWMEM_STOPS` (muse_bench's ``get_prefix_before_words_occur``)."""
    for stop in KNOWMEM_STOPS:
        output = output.split(stop)[0]
    return output


def budget(model, wanted: int) -> int:
    """``wanted`` new tokens, at most half the model's context (module docstring)."""
    ctx = model_max_length(model)
    return wanted if ctx is None else max(1, min(wanted, ctx // 2))


def reference_prefix(tokenizer, gt: str, n: int) -> str:
    """``gt`` cut to its first ``n`` token ids as muse_bench cuts it: ``tokenizer(gt)`` with Llama's special
    tokens (a bos, counting as one of the ``n``, where the model's sequences start with one:
    :func:`~obliviate.models.tokenizer.bos_prefix`), decoded without special tokens."""
    ids = (bos_prefix(tokenizer) + list(tokenizer(gt, add_special_tokens=False)["input_ids"]))[:n]
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True)


# ------------------------------------------------------------------ the metrics

def verbmem(model, tokenizer, records: Sequence[dict], max_new_tokens: int = VERBMEM_MAX_NEW_TOKENS,
            batch_size: int = 16) -> dict:
    """VerbMem (criterion 1): ``{"rouge_l_f1", "max_new_tokens", "outputs", "scores"}`` over the ``{prompt,
    gt}`` records."""
    if not records:
        raise DataError("MUSE VerbMem: no verbmem records")
    n = budget(model, max_new_tokens)
    outs = greedy_generate(model, tokenizer, [r["prompt"] for r in records], max_new_tokens=n,
                           batch_size=batch_size,
                           stop=None)
    scores = [rouge_l_f1(o, reference_prefix(tokenizer, r["gt"], n)) for o, r in zip(outs, records)]
    return {"rouge_l_f1": float(np.mean(scores)), "max_new_tokens": n, "outputs": outs, "scores": scores}


def knowmem(model, tokenizer, qa: Sequence[dict], icl: Sequence[dict],
            max_new_tokens: int = KNOWMEM_MAX_NEW_TOKENS,
            batch_size: int = 16) -> dict:
    """KnowMem (criteria 2 and 3): ``{"rouge_l_f1", "max_new_tokens", "outputs", "scores"}`` over the QA
    pairs, each asked after the in-context examples ``icl``."""
    if not qa:
        raise DataError("MUSE KnowMem: no questions")
    n = budget(model, max_new_tokens)
    outs = greedy_generate(model, tokenizer, [knowmem_prompt(x["question"], icl) for x in qa],
                           max_new_tokens=n,
                           batch_size=batch_size, stop=None)
    outs = [cut_answer(o) for o in outs]
    scores = [rouge_l_f1(o, x["answer"]) for o, x in zip(outs, qa)]
    return {"rouge_l_f1": float(np.mean(scores)), "max_new_tokens": n, "outputs": outs, "scores": scores}


def muse_mia_auc(model, tokenizer, mia: dict, batch_size: int = 16) -> float:
    """The Min-40% AUC of the task's MIA setting (``task.meta["mia"]``: members = forget samples, no eos), in
    obliviate's convention (:func:`obliviate.eval.mia.mia_auc`; MUSE's own AUC is one minus it)."""
    r = mia_metrics(model, tokenizer, mia["members"], mia["nonmembers"], k=mia.get("k", MUSE_MIA_K),
                    batch_size=batch_size, add_eos=mia.get("add_eos", False))
    return r["mia_auc_min_k"]


def muse_privleak(auc_model: float | None, auc_retrain: float | None) -> float | None:
    """MUSE's PrivLeak from the two models' ``muse_mia_auc`` (None when either is missing, or the retrained
    model's AUC is 1: undefined)."""
    if auc_model is None or auc_retrain is None or auc_retrain >= 1:
        return None
    return priv_leak(auc_model, auc_retrain)


# ------------------------------------------------------------------ the registered metrics (per model)

def _parts(task: Task) -> dict:
    """The task's MUSE parts (``meta["muse"]``: :func:`obliviate.tasks.muse.muse_parts`), empty on another
    task."""
    muse = task.meta.get("muse")
    return muse if isinstance(muse, dict) else {}


def _knowmem_need(part: str, label: str) -> Need:
    return Need(f"muse_{part}", lambda task, reference: bool(_parts(task).get(part))
                and _parts(task).get(f"{part}_icl") is not None,
                lambda task: f"no MUSE {label} questions with their "
                             f"in-context examples in task {task.name!r}")


VERBMEM_DATA = Need("muse_verbmem", lambda task, reference: bool(_parts(task).get("verbmem")),
                    lambda task: f"no MUSE verbmem records in task {task.name!r}")
KNOWMEM_FORGET_DATA = _knowmem_need("knowmem_forget", "forget")
KNOWMEM_RETAIN_DATA = _knowmem_need("knowmem_retain", "retain")
MIA_DATA = Need("muse_mia", lambda task, reference: bool(_parts(task)) and bool(task.meta.get("mia")),
                lambda task: f"no MUSE membership-inference samples in task {task.name!r}")
"""MUSE's MIA setting (``meta["mia"]`` of a MUSE task: its PrivLeak samples, else its raw forget and
holdout)."""


@register_metric("muse_verbmem_f", needs=[VERBMEM_DATA],
                 help="MUSE VerbMem on D_f: ROUGE-L F1 of greedy continuations of the verbmem prompts")
def _verbmem(run: MetricRun) -> dict:
    r = verbmem(run.model, run.tokenizer, _parts(run.task)["verbmem"], VERBMEM_MAX_NEW_TOKENS, run.batch_size)
    return {"muse_verbmem_f": r["rouge_l_f1"], "muse_verbmem_max_new_tokens": r["max_new_tokens"]}


def _knowmem(part: str, key: str, run: MetricRun) -> dict:
    muse = _parts(run.task)
    r = knowmem(run.model, run.tokenizer, muse[part], muse[f"{part}_icl"], KNOWMEM_MAX_NEW_TOKENS,
                run.batch_size)
    return {key: r["rouge_l_f1"], "muse_knowmem_max_new_tokens": r["max_new_tokens"]}


register_metric("muse_knowmem_f", needs=[KNOWMEM_FORGET_DATA],
                help="MUSE KnowMem on D_f: ROUGE-L F1 of few-shot answers to the forget questions")(
    functools.partial(_knowmem, "knowmem_forget", "muse_knowmem_f"))
register_metric("muse_knowmem_r", needs=[KNOWMEM_RETAIN_DATA],
                help="MUSE KnowMem on D_r (utility preservation): the same on the retain questions")(
    functools.partial(_knowmem, "knowmem_retain", "muse_knowmem_r"))


@register_metric("muse_mia_auc", needs=[MIA_DATA],
                 help="Min-40% AUC of MUSE's forget vs holdout samples, "
                      "which PrivLeak compares with the oracle's")
def _mia_auc(run: MetricRun) -> float:
    return muse_mia_auc(run.model, run.tokenizer, run.task.meta["mia"], run.batch_size)


MODEL_METRICS = ("muse_verbmem_f", "muse_knowmem_f", "muse_knowmem_r", "muse_mia_auc")
"""The registered metrics every model gets on a MUSE task (:func:`obliviate.eval.suite.task_metrics`);
PrivLeak is computed across models, from a model's and the oracle's ``muse_mia_auc``
(:func:`muse_privleak`)."""
