"""What a run spent (issue #56, item 8): one record per stage (unlearning, each attack, building and attacking
each control, each evaluation) of forward and backward passes (:func:`obliviate.models.layers.count_passes`),
tokens and wall seconds, with their total, under ``cost`` in ``results.json``, printed by :func:`cost_line`.
Wall seconds are never part of a run's identity or metrics. docs/evaluation.md, "Cost".
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from obliviate.models.layers import count_passes

PASS_KEYS = ("forwards", "backwards", "forward_tokens", "backward_tokens")
"""What :func:`~obliviate.models.layers.count_passes` counts, the integers of a stage's record."""


def pass_tokens(passes: dict | None) -> int | None:
    """Forward plus backward tokens of a ``count_passes`` dict or a stage's record (None without one)."""
    if not passes:
        return None
    return int(passes.get("forward_tokens") or 0) + int(passes.get("backward_tokens") or 0)


def stage_record(passes: dict | None = None, seconds: float = 0.0, **extra) -> dict:
    """One stage: ``passes`` (:data:`PASS_KEYS`; missing ones are 0), ``tokens`` (:func:`pass_tokens`),
    ``seconds`` and ``extra`` (``control``, ``cached``, ``built``, ...)."""
    rec = {k: int((passes or {}).get(k) or 0) for k in PASS_KEYS}
    rec["tokens"] = pass_tokens(rec)
    rec["seconds"] = round(float(seconds), 3)
    rec.update(extra)
    return rec


def total(stages: dict[str, dict]) -> dict:
    """The sums of :data:`PASS_KEYS`, ``tokens`` and ``seconds`` over ``stages``."""
    out = {k: sum(int(s.get(k) or 0) for s in stages.values()) for k in (*PASS_KEYS, "tokens")}
    out["seconds"] = round(sum(float(s.get("seconds") or 0.0) for s in stages.values()), 3)
    return out


class CostRecord:
    """The stages of one run, in the order they ran; :meth:`as_dict` is what ``results.json`` holds under
    ``cost``. The run's wall seconds count from this object's making."""

    def __init__(self):
        self.stages: dict[str, dict] = {}
        self._start = time.perf_counter()

    @contextlib.contextmanager
    def stage(self, name: str, *models, **extra) -> Iterator[dict]:
        """Count the passes through ``models`` and the wall seconds inside the block as stage ``name``; the
        block may add keys to the dict it gets (``cached``, ``built``). ``extra``: keys of the record
        (``control=True``)."""
        t = time.perf_counter()
        given: dict = {}
        with count_passes(*models) as passes:
            yield given
        self.add(name, passes, time.perf_counter() - t, **extra, **given)

    def add(self, name: str, passes: dict | None = None, seconds: float = 0.0, **extra) -> dict:
        """Record stage ``name`` (:func:`stage_record`); a second stage of the same name adds to the first."""
        rec = stage_record(passes, seconds, **extra)
        if name in self.stages:
            old = self.stages[name]
            rec = {**old, **extra, **{k: old[k] + rec[k] for k in (*PASS_KEYS, "tokens")},
                   "seconds": round(old["seconds"] + rec["seconds"], 3)}
        self.stages[name] = rec
        return rec

    def as_dict(self, **extra) -> dict:
        """``{"stages", "total", "controls", "wall_seconds"}``: ``total`` sums the stages' passes, tokens and
        seconds; ``controls`` the stages marked ``control``, with ``cache`` (:func:`cache_state`; None without
        any); ``wall_seconds`` the run's, from start to now (loading included). ``extra``: further keys
        (compare's shares)."""
        ctl = {n: s for n, s in self.stages.items() if s.get("control")}
        controls = {**total(ctl), "cache": cache_state(ctl)} if ctl else None
        return {"stages": dict(self.stages), "total": total(self.stages), "controls": controls,
                "wall_seconds": round(time.perf_counter() - self._start, 3), **extra}


def cache_state(stages: dict[str, dict]) -> str:
    """Whether the cache of the controls served ``stages``: ``hit`` (every one), ``partial`` (some) or
    ``miss`` (none)."""
    hits = [bool(s.get("cached")) for s in stages.values()]
    return "hit" if hits and all(hits) else "partial" if any(hits) else "miss"


def _tokens_text(n: int) -> str:
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.1f}{unit}"
    return str(n)


def cost_line(cost: dict) -> str:
    """The one line a run ends with (before its outcome or verdict): ``cost: 1,234 forward+backward passes,
    3.2M tokens, 41.0 s (controls 30.1 s, cached)``; the seconds are the run's wall time."""
    t = cost["total"]
    line = (f"cost: {t['forwards'] + t['backwards']:,} forward+backward passes ({t['forwards']:,} forward, "
            f"{t['backwards']:,} backward), {_tokens_text(t['tokens'])} tokens, {cost['wall_seconds']:.1f} s")
    c = cost.get("controls")
    if c:
        state = {"hit": ", cached", "partial": ", partly cached"}.get(c["cache"], "")
        line += f" (controls {c['seconds']:.1f} s{state})"
    return line


def share_of_pretraining(spent: dict | None, pretraining: dict | None) -> float | None:
    """``spent``'s tokens (forward plus backward) over ``pretraining``'s: a method's unlearning as a share of
    what training the oracle cost (None where either is unknown or the pretraining counted none)."""
    a, b = pass_tokens(spent), pass_tokens(pretraining)
    return None if a is None or not b else a / b


def cost_lines(cost: dict) -> list[str]:
    """:func:`cost_line`, then, for a comparison, each method's share of the oracle's pretraining
    (``share_of_oracle_pretraining``) in one line, saying what that pretraining was; where its passes are
    unknown, the line says why there is no share."""
    lines = [cost_line(cost)]
    shares, pre = cost.get("share_of_oracle_pretraining") or {}, cost.get("oracle_pretraining") or {}
    if pre and not pass_tokens(pre.get("passes")):
        lines.append(f"cost: no share of the oracle's pretraining: {pre.get('what')}")
    elif shares:
        each = ", ".join(f"{name} {'n/a' if v is None else f'{100 * v:.3g}%'}" for name, v in shares.items())
        lines.append(f"cost: each method's unlearning against the oracle's pretraining "
                     f"({_tokens_text(pass_tokens(pre.get('passes')) or 0)} forward+backward tokens; "
                     f"{pre.get('what')}): {each}")
    return lines
