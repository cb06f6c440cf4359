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


def ratio(a: int | None, b: int | None) -> float | None:
    """``a / b`` of two recorded counts; None where either is unknown or ``b`` is 0."""
    return None if a is None or not b else a / b


FLOPS_PER_PARAM = {"forward_tokens": 2, "backward_tokens": 4}
"""FLOPs per parameter per token of a pass: a forward pass 2 (a multiply and an add per weight), a backward pass 4
(the gradients of the activations and of the weights), the usual dense estimate (Kaplan et al. 2020; 6 per trained
token). Exact only for a pass through every weight that also computes every weight's gradient: a truncated
forward (RMU's to its layer) or a backward that skips frozen weights' gradients (LoRA) costs less."""


def pass_flops(passes: dict | None, n_params: int | None) -> int | None:
    """The FLOPs of ``passes`` (a ``count_passes`` dict or a stage's record) through a model of ``n_params``
    parameters: ``N (2 forward_tokens + 4 backward_tokens)`` (:data:`FLOPS_PER_PARAM`); None without either."""
    if not passes or n_params is None:
        return None
    return int(n_params) * sum(k * int(passes.get(key) or 0) for key, k in FLOPS_PER_PARAM.items())


def made_by(passes: dict | None, n_params: int | None, what: str, source: str, *,
            extra: dict | None = None) -> dict:
    """What making one model cost, as compare records it under ``cost.removal``: ``tokens`` (forward plus
    backward, :func:`pass_tokens`) and ``flops`` (:func:`pass_flops`) of ``passes`` plus those of
    ``extra["passes"]`` (a labelling run beside a pretraining), ``what`` was counted and ``from`` (the stage or
    file the passes were read from). Counts are None where the passes are unknown."""
    parts = [p for p in (passes, (extra or {}).get("passes")) if p]
    tokens = [pass_tokens(p) for p in parts]
    flops = [pass_flops(p, n_params) for p in parts]
    return {"tokens": sum(tokens) if parts else None,
            "flops": sum(flops) if parts and None not in flops else None, "what": what, "from": source}


def removal_shares(removal: dict[str, dict], pretraining: dict | None) -> tuple[dict, dict]:
    """``({model: tokens share}, {model: FLOPs share})``: each model's :func:`made_by` counts over the oracle's
    pretraining's (``pretraining``'s ``tokens`` and ``flops``); ``({}, {})`` where those are unknown."""
    if not pretraining or not pretraining.get("tokens"):
        return {}, {}
    return ({n: ratio(r.get("tokens"), pretraining["tokens"]) for n, r in removal.items()},
            {n: ratio(r.get("flops"), pretraining.get("flops")) for n, r in removal.items()})


def share_text(v: float | None) -> str:
    """A share as the line and the report show it: ``0.52%``, ``101%``, or ``n/a``."""
    return "n/a" if v is None else f"{100 * v:.3g}%"


def cost_lines(cost: dict) -> list[str]:
    """:func:`cost_line`, then, for a comparison, each model's cost as a share of the oracle's pretraining
    (``share_of_oracle_pretraining``, and of its FLOPs where ``share_of_oracle_pretraining_flops`` has one) in
    one line, saying what that pretraining was; where its passes are unknown, the line says why there is no
    share."""
    lines = [cost_line(cost)]
    shares, pre = cost.get("share_of_oracle_pretraining") or {}, cost.get("oracle_pretraining") or {}
    flops = cost.get("share_of_oracle_pretraining_flops") or {}
    if pre and not pass_tokens(pre.get("passes")):
        lines.append(f"cost: no share of the oracle's pretraining: {pre.get('what')}")
    elif shares:
        each = ", ".join(f"{name} {share_text(v)}" + (f" (FLOPs {share_text(flops[name])})"
                                                     if flops.get(name) is not None else "")
                         for name, v in shares.items())
        lines.append(f"cost: each model's unlearning or making against the oracle's pretraining "
                     f"({_tokens_text(pass_tokens(pre.get('passes')) or 0)} forward+backward tokens; "
                     f"{pre.get('what')}): {each}")
    return lines
