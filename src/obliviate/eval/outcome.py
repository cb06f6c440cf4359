"""Whether an unlearning run did what it should: one outcome from the base and the unlearned models' scores.

``forgot`` = ``(F0 - F) / (F0 - chance)`` in [0, 1], ``retained`` = ``K / K0``; ``"retain lost"`` below
``RETAIN_SHARE``, else ``"forgot little"`` below ``MIN_FORGOT``, else ``"ok"``, read through
:func:`verdict_score`. Not the verdict, which only calibrated attacks give. docs/methods.md, "Did the run
work? The outcome".
"""

from __future__ import annotations

from obliviate.eval.suite import keep_score, untrained_keep

RETAIN_SHARE = 0.9
"""The least share of the base model's keep score an unlearned model must keep (``tune``'s constraint)."""

MIN_FORGOT = 0.5
"""The least share of the forget score above chance a run must remove not to have 'forgot little'."""

OUTCOMES = ("ok", "forgot little", "retain lost")

_EPS = 1e-9
"""Shares are compared with this slack, so that a share exactly at its threshold (0.3 / 0.6) is not lost to
rounding."""


def verdict_score(m: dict, role: str = "forget") -> float | None:
    """The score of ``role`` an outcome or a verdict reads: ``<role>_score_norm`` where the evaluation wrote
    one (the role holds a cloze MCQ set, counted length-normalised:
    :func:`obliviate.eval.suite.evaluate_task`), else ``<role>_score``."""
    norm = m.get(f"{role}_score_norm")
    return norm if norm is not None else m.get(f"{role}_score")


def outcome_keep(m: dict) -> float | None:
    """:func:`~obliviate.eval.suite.keep_score` (retain, else neighbour, else utility) through
    :func:`verdict_score`."""
    for role in ("retain", "neighbour", "utility"):
        if m.get(f"{role}_score") is not None:
            return verdict_score(m, role)
    return keep_score(m)


def forgot_share(base: dict, after: dict) -> float | None:
    """``(F0 - F) / (F0 - chance)`` clipped to [0, 1]; 0 when the base is at chance; None without a forget
    score."""
    f0, f = verdict_score(base), verdict_score(after)
    if f0 is None or f is None:
        return None
    chance = base.get("forget_chance", 0.0) or 0.0
    if f0 - chance <= 0:
        return 0.0
    return float(min(1.0, max(0.0, (f0 - f) / (f0 - chance))))


def retained_share(base: dict, after: dict) -> float | None:
    """``K / K0`` of the keep scores (:func:`outcome_keep`); None without one, or K0 = 0."""
    k0, k = outcome_keep(base), outcome_keep(after)
    if k0 is None or k is None or k0 <= 0:
        return None
    return float(k / k0)


def unlearn_outcome(base: dict, after: dict, *, retain_share: float = RETAIN_SHARE,
                    min_forgot: float = MIN_FORGOT, method: str | None = None) -> dict:
    """The outcome of a run (module docstring): ``{"outcome", "forgot", "retained", "forget_before",
    "forget_after", "keep_before", "keep_after", "retain_share", "min_forgot", "line"}``; ``method`` names the
    method in the line's pointer to ``obliviate tune``."""
    forgot, retained = forgot_share(base, after), retained_share(base, after)
    lost = retained is not None and retained < retain_share - _EPS
    little = forgot is None or forgot < min_forgot - _EPS
    outcome = "retain lost" if lost else "forgot little" if little else "ok"
    v = {"outcome": outcome, "forgot": forgot, "retained": retained,
         "forget_before": verdict_score(base), "forget_after": verdict_score(after),
         "forget_chance": base.get("forget_chance", 0.0), "keep_before": outcome_keep(base),
         "keep_after": outcome_keep(after), "retain_share": retain_share, "min_forgot": min_forgot,
         "length_normalised": base.get("forget_score_norm") is not None}
    h0, h = untrained_keep(base)[0], untrained_keep(after)[0]
    # what S-unlearning's R reads: shown beside the keep, never hidden by it
    if h0 is not None and h is not None:
        v.update(heldout_keep_before=h0, heldout_keep_after=h,
                 heldout_retained=float(h / h0) if h0 > 0 else None)
    v["line"] = outcome_line(v, method)
    return v


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


CALIBRATED = ("whether the knowledge is gone or only suppressed is for `obliviate attack` (--model this "
              "model --base the one before) or `obliviate compare` to tell")
"""What an outcome line says where the forget score dropped: the outcome reads no attack."""


def outcome_line(v: dict, method: str | None = None) -> str:
    """The one line: the outcome, the numbers against their thresholds, and what to run next: unless ok,
    ``obliviate tune``; where the forget score dropped enough, the attacks that tell removal from
    suppression."""
    numbers = (f"forget {_num(v['forget_before'])} -> {_num(v['forget_after'])} (removed {_num(v['forgot'])} "
               f"of it, threshold {v['min_forgot']:.2f}), keep {_num(v['keep_before'])} -> "
               f"{_num(v['keep_after'])} (share {_num(v['retained'])}, threshold {v['retain_share']:.2f})")
    if "heldout_keep_before" in v:
        share = v["heldout_retained"]
        low = share is not None and share < v["retain_share"] - _EPS
        numbers += (f", held-out keep {_num(v['heldout_keep_before'])} -> {_num(v['heldout_keep_after'])} "
                    f"(share {_num(share)}"
                    f"{', below the threshold: what no method trained on was lost' if low else ''})")
    if v["outcome"] == "ok":
        return f"outcome: ok: {numbers}; {CALIBRATED}"
    little = v["forgot"] is None or v["forgot"] < v["min_forgot"] - _EPS
    what = "retain lost and forgot little" if v["outcome"] == "retain lost" and little else v["outcome"]
    tune = f"obliviate tune --method {method}" if method else "obliviate tune"
    return (f"outcome: {what}: {numbers}; try `{tune}` (or unlearn --tune) to choose settings for this model"
            + ("" if little else f"; {CALIBRATED}"))
