"""Controls that calibrate the attacks: is the instrument able to tell removal from suppression?

The negative control never saw the forget data; the positive control (:func:`suppression_control`)
only suppresses it (the base model with its last decoder layer trained to refuse). :func:`calibration`
reads an attack's result on both, :func:`verdict` places one method, :func:`robustness_summary` takes the worst
case over the calibrated attacks (the rule: docs/evaluation.md).
See docs/evaluation.md (Controls) and docs/tasks.md (Controls).
"""

from __future__ import annotations

import copy
import math

from obliviate.attacks.harness import qa_score_fn
from obliviate.data import IDENTITY_PROMPT
from obliviate.errors import DataError
from obliviate.eval.mia import priv_leak
from obliviate.eval.outcome import verdict_score
from obliviate.models.layers import num_layers, param_names_for
from obliviate.runs.report import markdown_table
from obliviate.tasks.base import IDK_ANSWERS, Data, Task
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


def recovery(start: float | None, after: float | None, base: float | None) -> float | None:
    """(after - start) / (base - start): the share of the lost forget score an attack brought back."""
    if None in (start, after, base) or base - start <= 1e-9:
        return None
    return (after - start) / (base - start)


def forgot(start: float | None, base: float | None, chance: float = 0.0) -> bool | None:
    """Whether a model had forgotten before the attack: its score above ``chance`` at most :data:`FORGOT_SHARE`
    of the base model's (a 4-way MCQ score at chance has forgotten everything, not 0.25 of it)."""
    if start is None or base is None:
        return None
    return start - chance <= FORGOT_SHARE * (base - chance) + 1e-12


def calibration(positive: dict, negative: dict, base_score: float, key: str, chance: float = 0.0) -> dict:
    """Whether attack ``key`` (``relearn`` or ``relearn_disjoint``) told the two controls apart.

    ``positive`` / ``negative``: the attack metrics of the two controls (``<key>_start_acc``, ``<key>_acc``).
    Calibrated: the positive control had forgotten, gets back at least :data:`MIN_POSITIVE_RECOVERY` of it and
    ends :data:`SEPARATION` above the negative control, which gains at most :data:`MAX_NEGATIVE_GAIN`; and the
    *removed* band (up to the negative control's recovery + :data:`REMOVED_TOLERANCE`) lies below the
    *suppressed* band (from :data:`SUPPRESSED_SHARE` of the positive control's recovery), so no method can
    be both.
    """
    p0, p1 = positive.get(f"{key}_start_acc"), positive.get(f"{key}_acc")
    n0, n1 = negative.get(f"{key}_start_acc"), negative.get(f"{key}_acc")
    pos, neg = recovery(p0, p1, base_score), recovery(n0, n1, base_score)
    neg_gain = None if None in (n0, n1) else n1 - n0
    floor = max(0.0, neg or 0.0)
    ok = (pos is not None and neg_gain is not None and bool(forgot(p0, base_score, chance))
          and pos >= MIN_POSITIVE_RECOVERY
          and neg_gain <= MAX_NEGATIVE_GAIN and p1 >= n1 + SEPARATION - 1e-9
          and floor + REMOVED_TOLERANCE < SUPPRESSED_SHARE * pos)
    return {f"{key}_positive_recovery": pos, f"{key}_negative_gain": neg_gain, f"{key}_negative_recovery": floor,
            f"{key}_calibrated": bool(ok)}


def verdict(m: dict, positive: dict, negative: dict, base_score: float, key: str, calibrated: bool,
            chance: float = 0.0) -> str:
    """not unlearned / removed / suppressed / inconclusive for one method under attack ``key``.

    *not unlearned*: it had not forgotten before the attack (:func:`forgot`); then, on a calibrated attack only,
    *removed*: a recovery within the negative control's (+ :data:`REMOVED_TOLERANCE`); *suppressed*: at least
    :data:`SUPPRESSED_SHARE` of the positive control's; else *inconclusive*. :func:`calibration` keeps the two
    bands apart, so *removed* and *suppressed* exclude each other.
    """
    start, after = m.get(f"{key}_start_acc"), m.get(f"{key}_acc")
    if start is None or after is None:
        return "inconclusive"
    if not forgot(start, base_score, chance):
        return "not unlearned"
    if not calibrated:
        return "inconclusive"
    c = calibration(positive, negative, base_score, key, chance)
    rec = recovery(start, after, base_score)
    if rec is None or c[f"{key}_positive_recovery"] is None:
        return "inconclusive"
    if rec <= c[f"{key}_negative_recovery"] + REMOVED_TOLERANCE:
        return "removed"
    if rec >= SUPPRESSED_SHARE * c[f"{key}_positive_recovery"]:
        return "suppressed"
    return "inconclusive"


def mia_reads(base: dict, negative: dict, key: str = "mia_auc_min_k") -> bool:
    """Whether membership inference reads the forget set: the base model's AUC and the negative control's differ by
    at least :data:`MIA_SEPARATION`."""
    b, n = base.get(key), negative.get(key)
    return b is not None and n is not None and abs(b - n) >= MIA_SEPARATION - 1e-9


PROBE_SEPARATION = 0.1
"""A probe reads the forget knowledge only when its accuracy and the negative control's differ by at least this."""


def control_readout(m: dict, control: dict | None) -> dict:
    """The probe and the MIA of ``m`` beside the negative control's (a model that was never taught the task).

    ``probe_control_acc`` and ``mia_auc_<score>_control`` are the control's figures; ``probe_chance`` becomes the
    control's accuracy (the empirical chance: what the questions' surface alone gives, not 1/k, kept as
    ``probe_chance_uniform``). ``probe_calibrated`` / ``mia_calibrated``: the figure separates from the control's
    (:data:`PROBE_SEPARATION`, :data:`MIA_SEPARATION` on Min-K%); without a control both are False, the figures
    uncalibrated."""
    out = {}
    if "probe_acc" in m:
        c = (control or {}).get("probe_acc")
        out.update(probe_control_acc=c, probe_calibrated=c is not None and abs(m["probe_acc"] - c) >= PROBE_SEPARATION - 1e-9)
        if c is not None:
            out.update(probe_chance_uniform=m.get("probe_chance"), probe_chance=c)
    mia = [k for k in m if k.startswith("mia_auc_") and not k.endswith("_control")]
    if mia:
        for k in mia:
            out[f"{k}_control"] = (control or {}).get(k)
        out["mia_calibrated"] = control is not None and mia_reads(m, control)
    return out


ATTACK_KEYS = ("relearn_disjoint", "relearn")
"""The relearning attacks a verdict can rest on, strongest first."""


def robustness_summary(metrics: dict) -> dict:
    """Calibration of each relearning attack against the controls, and per method one verdict.

    ``{"calibration": {attack: {...}}, "verdicts": {method: {"verdict", "attack", "reason"}}}``
    (:func:`method_verdict`). PrivLeak against the negative control is added to each row with MIA scores, the
    probe and MIA beside the negative control's (:func:`control_readout`) and ``recovery_cost_vs_oracle``.
    """
    pos, neg, base = metrics.get("positive_control"), metrics.get("oracle"), metrics["base"]
    calib = {}
    for key in ATTACK_KEYS:
        if pos is not None and neg is not None and f"{key}_acc" in pos and base.get(f"{key}_base_acc") is not None:
            calib[key] = calibration(pos, neg, base[f"{key}_base_acc"], key, base.get("attack_score_chance", 0.0))
    usable = [k for k in ATTACK_KEYS if calib.get(k, {}).get(f"{k}_calibrated")]
    verdicts = {name: method_verdict(m, base, pos, neg, usable) for name, m in metrics.items()
                if name not in ("base", "oracle", "positive_control")}
    for m in metrics.values():
        m.update(gaps(m))
    for name, m in metrics.items():
        if name != "oracle":
            m.update(control_readout(m, neg))
    cost = (neg or {}).get("recovery_cost_tokens")
    for name, m in metrics.items():
        if "recovery_cost_tokens" in m and neg is not None:  # a method's cost in units of the oracle's
            m["recovery_cost_vs_oracle"] = (None if cost is None or m["recovery_cost_tokens"] is None
                                            else m["recovery_cost_tokens"] / cost)
    if neg is not None:
        for name, m in metrics.items():
            for k in [k for k in m if k.startswith("mia_auc_")]:
                if neg.get(k) is not None and neg[k] < 1:
                    m[f"priv_leak_{k[len('mia_auc_'):]}"] = priv_leak(m[k], neg[k])
    return {"calibration": calib, "verdicts": verdicts}


def method_verdict(m: dict, base: dict, pos: dict | None, neg: dict | None, usable: list[str]) -> dict:
    """One method's verdict, the attack that decided it and why.

    A method whose forget score stays above :data:`FORGOT_SHARE` of the base model's is *not unlearned*;
    otherwise its verdict is the worst (:data:`SEVERITY`) over the calibrated attacks ``usable``, and *removed*
    also needs membership inference to read it as the negative control where MIA reads the forget set at all
    (:func:`mia_reads`). With no calibrated attack it is *inconclusive*.
    """
    f, f0 = verdict_score(m), verdict_score(base)  # a cloze MCQ set counted length-normalised (eval.outcome)
    if forgot(f, f0, base.get("forget_chance", 0.0)) is False:
        return {"verdict": "not unlearned", "attack": None,
                "reason": f"forget score {f:.2f} is above {FORGOT_SHARE:.0%} of the base model's {f0:.2f}"}
    if not usable:
        return {"verdict": "inconclusive", "attack": None, "reason": "no calibrated attack"}
    found = [(verdict(m, pos, neg, base[f"{k}_base_acc"], k, True, base.get("attack_score_chance", 0.0)), k)
             for k in usable]
    worst, key = max(found, key=lambda vk: SEVERITY[vk[0]])
    start, after = m.get(f"{key}_start_acc"), m.get(f"{key}_acc")
    reason = f"{key}: {start:.2f} -> {after:.2f}" if None not in (start, after) else f"{key}: not run"
    if worst == "removed" and neg is not None and mia_reads(base, neg):
        auc, auc_neg = m.get("mia_auc_min_k"), neg.get("mia_auc_min_k")
        if auc is not None and abs(auc - auc_neg) > MIA_TOLERANCE:
            return {"verdict": "inconclusive", "attack": "mia",
                    "reason": f"relearning brings nothing back, but membership inference tells the forget set from "
                              f"the holdout (Min-K% AUC {auc:.2f}, the negative control's {auc_neg:.2f})"}
    return {"verdict": worst, "attack": key, "reason": reason}


def gaps(m: dict) -> dict:
    """What the attacks read beyond the model's own answers, where ``m`` has the numbers:
    ``format_shift_gap``: ``format_shift_acc`` (the best variant of the forget set) minus ``forget_score``
    (the facts asked another way); ``probe_gap``: ``probe_acc`` minus ``forget_mcq_acc`` (what a linear probe
    reads from the hidden states that the model's own choice among the same options does not show)."""
    out = {}
    if m.get("format_shift_acc") is not None and m.get("forget_score") is not None:
        out["format_shift_gap"] = m["format_shift_acc"] - m["forget_score"]
    if m.get("probe_acc") is not None and m.get("forget_mcq_acc") is not None:
        out["probe_gap"] = m["probe_acc"] - m["forget_mcq_acc"]
    return out


ROBUSTNESS = ["model", "verdict", "relearn_disjoint_start_acc", "relearn_disjoint_acc",
              "relearn_disjoint_acc_optimistic", "relearn_acc", "recovery_cost_tokens", "recovery_cost_vs_oracle",
              "probe_acc", "probe_calibrated", "probe_gap", "format_shift_gap", "mia_auc_min_k", "priv_leak_min_k"]


def robustness_markdown(metrics: dict, robustness: dict) -> list[str]:
    """The robustness table (controls first) and one line per attack on its calibration."""
    rows = []
    for name in ["oracle", "positive_control"] + [n for n in metrics if n not in ("base", "oracle",
                                                                                  "positive_control")]:
        if name in metrics:
            v = robustness["verdicts"].get(name, {}).get("verdict", "(control)")
            rows.append({"model": name, "verdict": v, **{k: metrics[name].get(k) for k in ROBUSTNESS[2:]}})
    lines = ["## Robustness: does the knowledge come back?", "",
             "The oracle (never saw the forget data) is the negative control; `positive_control` is the base model "
             "with only its last layer trained to refuse the forget questions, so the knowledge is provably still "
             "in its weights. An attack that does not tell the two apart is **uncalibrated**: its numbers are "
             "shown but no verdict rests on it.", ""]
    for key, c in robustness["calibration"].items():
        pos, neg = c[f"{key}_positive_recovery"], c[f"{key}_negative_gain"]
        state = "calibrated" if c[f"{key}_calibrated"] else "**uncalibrated**"
        lines.append(f"- `{key}`: {state} (positive control recovers "
                     f"{'n/a' if pos is None else f'{100 * pos:.0f}%'} of the base score, the oracle gains "
                     f"{'n/a' if neg is None else f'{neg:+.2f}'}).")
    if not robustness["calibration"]:
        lines.append("- no relearning attack could be calibrated (no controls, or no relearning data).")
    return lines + ["", markdown_table(rows, ROBUSTNESS), ""]
