"""Unlearning quality (UQ) from the forget drop (FQ) and retain degradation (RD).

``FQ = (F0 - Fu) / F0`` in [0, 1], ``RD = max(0, (R0 - Ru) / R0)`` at most 1, ``UQ = 100 * HM(FQ, 1 - RD)``.
The relative forget drop is :func:`forget_drop`, not ``forget_quality``: that is TOFU's name for a different
metric (:func:`obliviate.eval.tofu.forget_quality`). docs/evaluation.md, "UQ / FQ / RD".
"""

from __future__ import annotations

from obliviate.errors import ObliviateError
from obliviate.eval.core import harmonic_mean


def forget_drop(forget_base: float, forget_after: float) -> float:
    """FQ = (F0 - Fu) / F0, clipped to [0, 1]: the relative drop of the forget score."""
    if forget_base <= 0:
        raise ObliviateError(f"the forget drop needs a positive base forget score F0, got {forget_base}")
    return float(min(1.0, max(0.0, (forget_base - forget_after) / forget_base)))


def retain_degradation(retain_base: float, retain_after: float) -> float:
    """RD = max(0, (R0 - Ru) / R0), at most 1."""
    if retain_base <= 0:
        raise ObliviateError(f"retain degradation needs a positive base retain score R0, got {retain_base}")
    return float(min(1.0, max(0.0, (retain_base - retain_after) / retain_base)))


def unlearning_quality(forget_base: float, forget_after: float, retain_base: float,
                       retain_after: float) -> dict:
    """{"fq", "rd", "uq"}: UQ = 100 * HM(FQ, 1 - RD), in [0, 100]."""
    fq = forget_drop(forget_base, forget_after)
    rd = retain_degradation(retain_base, retain_after)
    return {"fq": fq, "rd": rd, "uq": 100.0 * harmonic_mean([fq, 1.0 - rd])}
