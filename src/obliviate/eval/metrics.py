"""Metrics a task asks for by name: OpenUnlearning's memorization metrics and its six MIAs, on any task.

A task names the metrics its every evaluation adds in ``task.meta["metrics"]`` (the ``tofu:`` task:
extraction strength and exact memorization); :func:`obliviate.eval.suite.evaluate_task` computes them with
:func:`task_metrics`, and a report may ask for more (TOFU's adds the six MIAs,
:func:`obliviate.eval.tofu.tofu_metrics`). Names are OpenUnlearning's metric handlers:

| name | result key | on |
|---|---|---|
| ``extraction_strength`` | ``extraction_strength`` | the forget QA pairs (or documents) |
| ``exact_memorization`` | ``exact_memorization`` | the forget QA pairs (or documents) |
| ``mia_loss``, ``mia_zlib``, ``mia_min_k``, ``mia_min_k_plus_plus`` | ``mia_auc_<score>`` | forget vs holdout |
| ``mia_gradnorm`` | ``mia_auc_gradnorm`` | forget vs holdout |
| ``mia_reference`` | ``mia_auc_reference`` | forget vs holdout, with a reference model |

A metric whose data is missing (no holdout; no reference model) is left out, never filled in:
:func:`unavailable` says in one line each which and why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from obliviate.errors import ConfigError, DataError
from obliviate.eval.memorization import memorization_metrics
from obliviate.eval.mia import GRADNORM_P, SCORES, mia_metrics
from obliviate.registry import Registry
from obliviate.tasks.base import Task


@dataclass(frozen=True)
class TaskMetric:
    name: str
    key: str
    """The result key."""
    needs: str
    """``"forget"``: the forget data; ``"holdout"``: the forget data and a holdout; ``"reference"``: both and a
    reference model."""
    help: str


METRICS = Registry("metric")
"""``name -> TaskMetric`` (module docstring)."""


def register_metric(name: str, key: str, needs: str, help: str) -> TaskMetric:
    if needs not in ("forget", "holdout", "reference"):
        raise ValueError(needs)
    return METRICS.add(name, TaskMetric(name, key, needs, help))


register_metric("extraction_strength", "extraction_strength", "forget",
                "1 - (shortest answer prefix from which greedy decoding completes the answer) / answer length "
                "(obliviate.eval.memorization)")
register_metric("exact_memorization", "exact_memorization", "forget",
                "share of answer tokens the model predicts greedily given the true prefix "
                "(obliviate.eval.memorization)")
for _score in SCORES:
    register_metric(f"mia_{_score}", f"mia_auc_{_score}", "holdout",
                    f"ROC AUC of the {_score} member score, forget (members) vs holdout (obliviate.eval.mia)")
register_metric("mia_gradnorm", "mia_auc_gradnorm", "holdout",
                "ROC AUC of minus the per-example gradient norm, forget vs holdout "
                "(obliviate.eval.mia.gradnorm_scores)")
register_metric("mia_reference", "mia_auc_reference", "reference",
                "ROC AUC of L_ref(x) - L(x), forget vs holdout, against a reference model "
                "(obliviate.eval.mia.reference_scores)")
del _score

OPEN_UNLEARNING_TOFU = ("extraction_strength", "exact_memorization", "mia_loss", "mia_zlib", "mia_min_k",
                        "mia_min_k_plus_plus", "mia_gradnorm", "mia_reference")
"""OpenUnlearning's ``eval=tofu`` metrics beyond TOFU's own: the two memorization metrics and the six MIAs."""


def requested_metrics(task: Task) -> tuple[str, ...]:
    """The metric names ``task.meta["metrics"]`` asks for (none by default), each checked against :data:`METRICS`."""
    names = task.meta.get("metrics") or ()
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise ConfigError(f"task {task.name!r}: meta['metrics'] must be a list of metric names, got {names!r:.80}")
    for n in names:
        METRICS.lookup(n)
    return tuple(dict.fromkeys(names))


def forget_examples(task: Task, tokenizer=None) -> list:
    """The forget data as ``(prompt, answer)`` pairs in the task's format, else its documents."""
    if task.forget.qa:
        return task.prompt.pairs(task.forget.qa, tokenizer)
    return list(task.forget.docs)


def holdout_examples(task: Task, tokenizer=None) -> list | None:
    """The holdout as the forget data's kind (pairs or documents); None without a holdout of that kind."""
    h = task.holdout
    if not h:
        return None
    if task.forget.qa:
        return task.prompt.pairs(h.qa, tokenizer) if h.qa else None
    return list(h.docs) or None


def unavailable(task: Task, names: Sequence[str], reference: bool = False, tokenizer=None) -> list[str]:
    """One line per group of ``names`` that :func:`task_metrics` leaves out, saying what it lacks (``reference``:
    whether a reference model is given)."""
    lines = []
    hold = [n for n in names if METRICS.lookup(n).needs in ("holdout", "reference")]
    if hold and holdout_examples(task, tokenizer) is None:
        where = task.meta.get("holdout_file")
        lines.append(f"no holdout split{f': looked for {where}' if where else f' in task {task.name!r}'}; "
                     f"{', '.join(METRICS[n].key for n in hold)} not reported")
    elif not reference and any(METRICS.lookup(n).needs == "reference" for n in names):
        lines.append("no reference model given; mia_auc_reference not reported")
    return lines


def task_metrics(model, tokenizer, task: Task, names: Sequence[str] | None = None, *, reference_model=None,
                 batch_size: int = 16, k: float = 0.2, p: float = GRADNORM_P, add_eos: bool | None = None) -> dict:
    """The values of the metrics ``names`` (default: :func:`requested_metrics`) of ``model`` on ``task``, keyed as
    :data:`METRICS` says; those :func:`unavailable` names are left out. ``k``: the Min-K% / Min-K%++ fraction;
    ``p``: GradNorm's norm; ``reference_model``: ``mia_reference``'s (it must share ``tokenizer``); ``add_eos``:
    whether an eos is scored after each answer (default: yes, but not after a chat template's end of turn, as the
    task's training sequences)."""
    names = requested_metrics(task) if names is None else tuple(dict.fromkeys(names))
    add_eos = not task.prompt.chat if add_eos is None else add_eos
    entries = [METRICS.lookup(n) for n in names]
    if not entries:
        return {}
    out: dict = {}
    forget = forget_examples(task, tokenizer)
    if not forget:
        raise DataError(f"task {task.name!r} has no forget data to compute {', '.join(names)} on")
    if any(e.needs == "forget" for e in entries):
        mem = memorization_metrics(model, tokenizer, forget, batch_size=batch_size, add_eos=add_eos)
        out.update({e.key: mem[e.key] for e in entries if e.needs == "forget"})
    holdout = holdout_examples(task, tokenizer)
    mia = [e for e in entries if e.needs in ("holdout", "reference")]
    if mia and holdout is not None:
        ref = reference_model if any(e.needs == "reference" for e in mia) else None
        res = mia_metrics(model, tokenizer, forget, holdout, k=k, batch_size=batch_size, add_eos=add_eos,
                          gradnorm=any(e.name == "mia_gradnorm" for e in mia), p=p, reference_model=ref)
        out.update({e.key: res[e.key] for e in mia if e.key in res})
    return {e.key: out[e.key] for e in entries if e.key in out}  # in the order asked
