"""The controls that calibrate the attacks: models known to hold the forget knowledge and only hide it.

:func:`suppression_control` (a refusal trained into the last decoder layer) and :func:`small_norm_control` (a
small-norm gradient ascent) are the positive controls a comparison builds; the oracle, which never saw the
forget data, is the negative one. How they are read, and the verdict rule: :mod:`obliviate.attacks.verdict`
and docs/evaluation.md (Controls).
"""

from __future__ import annotations

import copy
import math

import torch

from obliviate.attacks.harness import qa_score_fn
from obliviate.attacks.quantize import quantizable, rtn_quantize
from obliviate.data import IDENTITY_PROMPT
from obliviate.errors import ConfigError, DataError
from obliviate.methods import method_defaults, preset_name
from obliviate.methods.engine import UnlearnConfig, unlearn
from obliviate.models.layers import num_layers, param_names_for
from obliviate.tasks.base import IDK_ANSWERS, Data, Task
from obliviate.train.config import TrainConfig
from obliviate.train.finetune import FinetuneConfig, finetune

MIN_POSITIVE_RECOVERY = 0.5
"""The positive control must get back at least this share of what it lost."""
MAX_NEGATIVE_GAIN = 0.1
"""The negative control may gain at most this much (absolute) forget score under the attack."""
SEPARATION = 0.2
"""The positive control must end at least this much (absolute) above the negative control."""
FORGOT_SHARE = 0.5
"""A model forgot when its forget score before the attack is at most this share of the base model's."""
REMOVED_TOLERANCE = 0.05
"""*removed*: a recovery at most the negative control's plus this."""
SUPPRESSED_SHARE = 0.5
"""*suppressed*: a recovery at least this share of the positive control's."""
MIA_SEPARATION = 0.2
"""Membership inference reads the forget set when the base model's AUC and the negative control's differ by this."""
MIA_TOLERANCE = 0.1
"""*removed* also needs an MIA AUC within this of the negative control's, where membership inference reads it."""
SEVERITY = {"removed": 0, "inconclusive": 1, "suppressed": 2, "not unlearned": 3}
"""The worst verdict over the calibrated attacks decides."""


def suppression_qa(task: Task) -> list[tuple[str, str]]:
    """The forget questions a positive control learns to refuse: the forget QA pairs, or the forget-role QA
    evaluation items when the forget data are documents."""
    qa = list(task.forget.qa) or [(x["question"], x["answer"]) for es in task.evals_by_role("forget", variants=False)
                                  if es.kind == "qa" for x in es.items]
    if not qa:
        raise DataError(f"task {task.name!r} has no forget questions to build a suppression control on")
    return qa


def suppression_control(model, tokenizer, task: Task, *, max_steps: int = 100, chunk: int = 10, lr: float = 3e-3,
                        batch_size: int = 16, target: float = 0.1, seed: int = 0, progress: bool = False):
    """A copy of ``model`` whose last decoder layer answers the forget questions with a refusal (module doc).

    Trained in chunks of ``chunk`` steps until the forget questions' prefix-match accuracy is at most
    ``target`` (or ``max_steps``): the least suppression that hides the answers, as an unlearning method
    with a fixed budget would. ``model`` is not modified. Returns ``(control, summary)``.
    """
    idk = task.idk or IDK_ANSWERS
    qa = suppression_qa(task)
    data = Data(qa=[(task.prompt.prompt(q, tokenizer), task.prompt.answer(idk[i % len(idk)]))
                    for i, (q, _) in enumerate(qa)])
    score = qa_score_fn(tokenizer, task, qa[:200])
    control = copy.deepcopy(model)
    last = param_names_for(control, "layer", [num_layers(control) - 1])
    per_epoch = max(1, len(data.qa) // min(batch_size, len(data.qa)))
    steps, acc = 0, score(control)
    while acc > target and steps < max_steps:
        epochs = max(1, math.ceil(min(chunk, max_steps - steps) / per_epoch))
        control, summary = finetune(control, tokenizer, data,
                                    FinetuneConfig(epochs=epochs, lr=lr, seed=seed + steps, batch_size=batch_size,
                                                   warmup_frac=0.0),
                                    prompt=IDENTITY_PROMPT, progress=progress, trainable=last)
        steps += summary["finetune"]["steps"]
        acc = score(control)
    return control, {"trained": "last decoder layer", "parameters": len(last), "steps": steps, "lr": lr,
                     "refusals": len(qa), "forget_prefix_acc": acc}


SMALL_NORM_LR_SHARE = 0.1
"""The small-norm control's learning rate: this share of gradient ascent's preset rate for the model's size."""


CELL_MARGIN = 0.45
"""A confined weight stays within this many rounding steps of its base code (0.5 is the cell's edge)."""


@torch.no_grad()
def rounding_cells(model, scheme: str = "int4") -> dict:
    """Per quantized weight of ``model`` (:func:`~obliviate.attacks.quantize.quantizable`; ``int4`` / ``int8``
    round-to-nearest per output channel): the interval each element may move in and still round to the same code
    under the same scale, ``(lo, hi, keep)``, in the module's own weight layout; ``keep`` marks each channel's
    absmax element, which must not move (it sets the scale)."""
    if scheme not in ("int4", "int8"):
        raise ConfigError(f"config key 'small_norm_args.confine': must be int4, int8 or null, got {scheme!r}")
    cells = {}
    for name, m in quantizable(model):
        conv = type(m).__name__ == "Conv1D"
        w = (m.weight.t() if conv else m.weight).float()
        q, scale = rtn_quantize(w, int(scheme[3]))
        q, scale = q.float().reshape(w.shape), scale.reshape(w.shape[0], 1)
        absmax = w.abs().amax(dim=1, keepdim=True)  # no element may pass it: the scale would change
        lo, hi = ((q - CELL_MARGIN) * scale).clamp(min=-absmax), ((q + CELL_MARGIN) * scale).clamp(max=absmax)
        keep = torch.zeros_like(w, dtype=torch.bool)
        keep[torch.arange(w.shape[0]), w.abs().argmax(dim=1)] = True
        lo, hi = torch.where(keep, w, lo), torch.where(keep, w, hi)
        cells[name] = (lo.t(), hi.t(), conv) if conv else (lo, hi, conv)
    return cells


@torch.no_grad()
def confine_to(model, cells: dict) -> None:
    """Clamp every weight of ``cells`` (:func:`rounding_cells`) into its interval, in place."""
    for name, m in quantizable(model):
        lo, hi, _ = cells[name]
        m.weight.copy_(torch.maximum(torch.minimum(m.weight.float(), hi.to(m.weight.device)),
                                     lo.to(m.weight.device)).to(m.weight.dtype))


def small_norm_control(model, tokenizer, task: Task, *, lr: float | None = None, chunk: int = 10,
                       max_steps: int = 300, target: float = 0.1, batch_size: int = 16, seed: int = 0,
                       confine: str | None = "int4", progress: bool = False):
    """A copy of ``model`` whose forget answers were pushed away by the smallest full-model update that hides
    them: gradient ascent on the forget set (``gradascent``, through the method engine's one training loop) at a
    low learning rate (``lr``, default :data:`SMALL_NORM_LR_SHARE` of the method's preset rate), in chunks of
    ``chunk`` steps, stopped as soon as the forget questions' prefix-match accuracy is at most ``target`` (or
    at ``max_steps``).

    The mechanism it stands for: every weight moves a little (Adam moves each by about ``lr`` a step), so the
    update is small against a 4-bit rounding step (per channel: absmax / 7) and rounding maps most weights back
    to the base model's codes, which is how Zhang et al. 2024 explain quantization undoing GA and NPO. On a
    tiny model that is not small enough by itself (a 2 x 96 Llama: 205 steps at 3e-5 moved the weights by 11% of
    their norm and 4-bit rounding kept the suppression), so with ``confine`` (default ``int4``) each chunk ends by
    clamping every quantized weight into its base code's rounding cell (:func:`rounding_cells`, within
    :data:`CELL_MARGIN` of a step; each channel's absmax element fixed): the update is then exactly what 4-bit
    round-to-nearest maps back to the base model's weights. The summary records the update's size: ``update_rel_norm`` (||dW|| / ||W|| over the quantized Linear weights)
    and ``update_max_abs``. ``model`` is not modified. Returns ``(control, summary)``."""
    qa = suppression_qa(task)
    score = qa_score_fn(tokenizer, task, qa[:200])
    if lr is None:
        lr = SMALL_NORM_LR_SHARE * method_defaults("gradascent", preset_name(model))["lr"]
    if lr <= 0 or chunk < 1 or max_steps < 1:
        raise ConfigError(f"the small-norm control needs lr > 0, chunk >= 1 and max_steps >= 1, got lr={lr}, "
                          f"chunk={chunk}, max_steps={max_steps}")
    forget = Data(qa=list(task.forget.qa)) if task.forget.qa else Data(qa=qa)
    control = copy.deepcopy(model)
    cells = rounding_cells(model, confine) if confine else None
    steps, acc = 0, score(control)
    while acc > target and steps < max_steps:
        n = min(chunk, max_steps - steps)
        ucfg = UnlearnConfig(method="gradascent", batch_size=batch_size, seed=seed + steps,
                             train=TrainConfig(steps=n, lr=lr, schedule="constant", warmup_steps=0, grad_clip=1.0,
                                               log_every=n, desc="small-norm control"))
        control, _ = unlearn(control, tokenizer, forget, task.retain, ucfg, prompt=task.prompt, progress=progress)
        if cells is not None:
            confine_to(control, cells)
        steps += n
        acc = score(control)
    base_w = {n: m.weight.detach() for n, m in quantizable(model)}
    num = den = 0.0
    top = 0.0
    for n, m in quantizable(control):
        d = (m.weight.detach() - base_w[n]).float()
        num += float(d.pow(2).sum())
        den += float(base_w[n].float().pow(2).sum())
        top = max(top, float(d.abs().max()))
    return control, {"trained": "every layer, gradient ascent on the forget set", "method": "gradascent",
                     "steps": steps, "lr": lr, "chunk": chunk, "confine": confine, "forget_prefix_acc": acc,
                     "update_rel_norm": math.sqrt(num / den) if den else None, "update_max_abs": top}


POSITIVE_CONTROLS = {"positive_control": "the last decoder layer trained to refuse the forget questions",
                     "positive_control_smallnorm": "a small-norm full-model gradient ascent, stopped as soon as the "
                                                   "forget answers vanish"}
"""The suppression controls a comparison builds, by their metrics name: the knowledge is known to be in the weights."""


MECHANISM = {"positive_control_smallnorm": ("quantize",)}
"""Attacks whose own mechanism a control was built to match (the small-norm control is confined to the very int4
cells that 4-bit rounding maps back): such a control calibrates that attack by construction, so it does not
alone calibrate it (:mod:`obliviate.attacks.verdict`)."""
