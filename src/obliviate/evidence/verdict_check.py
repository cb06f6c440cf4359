"""The verdict's own error rates, measured by simulation (issue #57; docs/evaluation.md, "The rule's own error
rates"): a *template* comparison's rates taken as true, a :class:`Scenario` of what a judged model holds
(``oracle + h (base - oracle)`` under its attacks), every number the rule reads redrawn as ``Binomial(n, rate)
/ n`` (:func:`draw_plan`), :func:`~obliviate.evidence.verdict.robustness_summary` run and the verdicts counted
against :data:`BOUNDS` (:func:`verdict_check`; :func:`synthetic_template` needs no model run).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from obliviate.errors import DataError
from obliviate.evidence.controls import POSITIVE_CONTROLS
from obliviate.evidence.verdict import (DEFAULT_ITEMS, REFERENCES, VERDICTS, base_reference, clopper_pearson,
                                       count_of, finite, read_counts, reads, robustness_summary)
from obliviate.runs.report import markdown_table, plot_recovery_curves

JUDGED = "judged"
"""The judged model's row in a simulated comparison (the template's own judged rows are left out)."""
ROLES = ("forget", "retain", "neighbour", "utility")
"""The role scores the rule reads (``<role>_score``, ``<role>_score_norm``), each over ``<role>_items``
items."""
KEEP_ROLES = ROLES[1:]
LEVEL = 0.95
"""The level of each simulated share's interval (Clopper-Pearson, exact)."""
POWER_GRID = tuple(round(0.1 * i, 1) for i in range(11))
"""The held shares of the power curve (every attack)."""
ONE_ATTACK_HELD = 0.3
EVERY_ATTACK_HELD = 0.1
DETECT_HELD = 0.2
"""The held share every deciding attack must detect with 80% power (issue #57, acceptance 2)."""


@dataclass(frozen=True)
class Scenario:
    """What the judged model truly holds: ``held`` (h) of what the base model shows above the oracle, under
    the attacks ``under`` (read names of :func:`~obliviate.evidence.verdict.reads`; None: every attack).
    ``held=0``: a model that truly removed (a copy of the oracle that keeps the base model's retain and
    neighbour scores)."""

    held: float = 0.0
    under: tuple[str, ...] | None = None

    def __post_init__(self):
        if isinstance(self.held, bool) or not isinstance(self.held, (int, float)) or not 0 <= self.held <= 1:
            raise ValueError(f"held must be a share in [0, 1], got {self.held!r}")
        unknown = [k for k in self.under or () if k not in reads()]
        if unknown:
            raise ValueError(f"unknown read {unknown[0]!r} (known: {', '.join(reads())})")

    def describe(self) -> str:
        if self.held == 0:
            return "truly removed (the oracle's rates, the base model's keep scores)"
        where = "every attack" if self.under is None else f"{', '.join(self.under)} only"
        return f"holds {self.held:g} under {where}"


@dataclass(frozen=True)
class Bound:
    """One of issue #57's bounds: in ``scenario`` (a key of :func:`verdict_check`'s ``scenarios``), the share
    of ``verdict`` is at most ``at_most``."""

    name: str
    scenario: str
    verdict: str
    at_most: float
    what: str


BOUNDS = (Bound("removed_false_suppressed", "removed", "suppressed", 0.0, "truly removed: false suppressed"),
          Bound("removed_false_inconclusive", "removed", "inconclusive", 0.05, "truly "
          "removed: false inconclusive"),
          Bound("one_attack_false_removed", "one_attack", "removed", 0.01,
                f"holds {ONE_ATTACK_HELD:g} under one calibrated attack{{worst}}: false removed"),
          Bound("every_attack_false_removed", "every_attack", "removed", 0.05,
                f"holds {EVERY_ATTACK_HELD:g} under every attack: false removed"))
"""Issue #57, acceptance 4: the bounds the rule's simulated error rates must meet (``{worst}`` in ``what``:
the attack whose share is checked, where the scenario runs one per attack)."""
POWER_BOUND = Bound("power_one_attack", "detect", "removed", 1 - 0.8,
                    f"holds {DETECT_HELD:g} under one deciding "
                    "attack{worst}: removed (80% power, acceptance 2)")


# ------------------------------------------------------------------------------------------------ the
# template

def _rate(row: dict, key: str, name: str) -> float | None:
    """``row[key]`` as a true rate in [0, 1]; None where it is missing or not a finite number (left as it is:
    the rule reads a missing number as missing). A number outside [0, 1] is a DataError: a binomial draw needs
    a share."""
    v = finite(row.get(key))
    if v is None:
        return None
    if not -1e-9 <= v <= 1 + 1e-9:
        raise DataError(f"metrics of {name!r}: {key} = {v!r} is not a share in [0, 1], which the simulation "
                        "draws item by item (Binomial(n, rate) / n)")
    return min(1.0, max(0.0, float(v)))


def draw_plan(row: dict, items: int, name: str = "model") -> list[tuple[str, float, int, int]]:
    """``[(key, true rate, n, variants), ...]``: every number of one model's metrics ``row`` that the rule
    reads, each once: the role scores (``<role>_score``, ``_score_norm``) over ``<role>_items`` items, then
    each read's start, after and base reference over the read's ``<name>_items`` (the after-score the maximum
    of ``<name>_variants`` draws); a count the metrics do not record is ``items`` (and one variant). A key
    read by several reads (``forget_score``, the start of every read on the model's own scale) is drawn once,
    as its role's score. Missing or non-finite numbers are not drawn."""
    plan, seen = [], set()
    for role in ROLES:
        n = count_of(row, f"{role}_items", items)
        for key in (f"{role}_score", f"{role}_score_norm"):
            p = _rate(row, key, name)
            if p is not None:
                plan.append((key, p, n, 1))
                seen.add(key)
    for r in reads().values():
        n, v = read_counts(row, r.name, items)
        for key, variants in ((r.start, 1), (r.after, v), (r.base, 1)):
            if key is None or key in seen:
                continue
            p = _rate(row, key, name)
            if p is not None:
                plan.append((key, p, n, variants))
                seen.add(key)
    return plan


def draw(plan: list[tuple[str, float, int, int]], trials: int,
         rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``{key: trials values}`` of a :func:`draw_plan`: each ``Binomial(n, rate) / n``, the largest of
    ``variants`` independent draws (a maximum over variant scores, each over the same ``n`` items, as if
    independent: the worst case for a false exceedance, as the variants of one model are positively
    correlated)."""
    return {key: rng.binomial(n, p, size=(trials, v)).max(axis=1) / n for key, p, n, v in plan}


def references(template: dict) -> dict:
    """The template's base model, oracle and positive controls (its judged rows left out), each a copy; a
    DataError naming what is missing where the rule could give no verdict."""
    if not isinstance(template, dict):
        raise DataError("a template is a comparison's metrics, {model: metrics}, got "
                        f"{type(template).__name__}")
    missing = [n for n in ("base", "oracle") if not isinstance(template.get(n), dict)]
    if missing:
        raise DataError(f"the comparison has no {' and no '.join(repr(n) for n in missing)} metrics, which "
                        "every verdict reads (found: " + (", ".join(map(repr, template)) or "none") + ")")
    if not any(isinstance(template.get(c), dict) for c in POSITIVE_CONTROLS):
        raise DataError("the comparison has no positive control "
                        "(" + ", ".join(POSITIVE_CONTROLS) + "): no attack can be calibrated, so every "
                                                             "verdict is inconclusive and "
                                                             "there is no error rate to measure")
    refs = {n: dict(template[n]) for n in template if n in REFERENCES and isinstance(template[n], dict)}
    if not any(_rate(refs["oracle"], r.after, "oracle") is not None for r in reads().values() if r.decides):
        raise DataError("the oracle's metrics hold no after-attack score of any deciding attack ("
                        + ", ".join(r.after for r in reads().values() if r.decides) + ")")
    for name, row in refs.items():
        draw_plan(row, DEFAULT_ITEMS, name)  # every number the rule reads is a share, or fails here
    return refs


def scenario_rates(template: dict, scenario: Scenario) -> dict:
    """The true rates of a simulated comparison: the template's references (:func:`references`) and the judged
    model of ``scenario`` (:class:`Scenario`), under :data:`JUDGED`."""
    refs = references(template)
    base, oracle = refs["base"], refs["oracle"]
    model = dict(oracle)
    # keeps what it should: the base model's scores (and items), where the base has them
    for role in KEEP_ROLES:
        for key in (f"{role}_score", f"{role}_score_norm", f"{role}_items"):
            if key in base:
                model[key] = base[key]
    h = float(scenario.held)
    for r in reads().values():
        if scenario.under is not None and r.name not in scenario.under:
            continue
        p, ref = _rate(oracle, r.after, "oracle"), base_reference(base, r.name)[0]
        if p is not None and isinstance(ref, (int, float)) and math.isfinite(ref) and h:
            model[r.after] = min(1.0, max(0.0, p + h * (float(ref) - p)))
    return {**refs, JUDGED: model}


def calibrated_reads(template: dict, items: int | None = None) -> dict[str, bool]:
    """``{read: calibrated}`` for every deciding read the rule reads on the template's true rates (no noise),
    with a truly removed judged model beside them."""
    summary = robustness_summary(copy.deepcopy(scenario_rates(template, Scenario())), items=items)
    return {k: bool(c["calibrated"]) for k, c in summary["calibration"].items() if c.get("decides", True)}


# ------------------------------------------------------------------------------------------------ simulation

def interval(count: int, trials: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided ``level`` interval of a share ``count / trials``
    (:func:`~obliviate.evidence.verdict.clopper_pearson`)."""
    return clopper_pearson(count, trials, level)


def simulate(template: dict, scenario: Scenario, trials: int, seed, items: int | None = None, *,
             tick: Callable[[int], None] | None = None) -> dict:
    """The judged model's verdicts over ``trials`` simulated comparisons of ``scenario`` (module docstring).

    ``template``: a comparison's metrics (the true rates); ``seed``: numpy's seed (an int, or ints: the same
    seed gives the same shares); ``items``: the comparison's item count, for the reads whose metrics record
    none (the rule's own ``items``). ``tick(1)``: called after every trial (a progress bar).

    ``{"scenario", "held", "under", "trials", "counts": {verdict: count}, "shares": {verdict: share},
    "intervals": {verdict: [lo, hi]}}`` over every verdict of :data:`~obliviate.evidence.verdict.VERDICTS`."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    truth = scenario_rates(template, scenario)
    fallback = DEFAULT_ITEMS if items is None else max(1, int(items))
    rng = np.random.default_rng(seed)
    draws = {name: draw(draw_plan(row, fallback, name), trials, rng) for name, row in truth.items()}
    counts = dict.fromkeys(VERDICTS, 0)
    for t in range(trials):
        metrics = {name: {**row, **{k: float(a[t]) for k, a in draws[name].items()}} for name,
                   row in truth.items()}
        verdict = robustness_summary(metrics, items=items)["verdicts"][JUDGED]["verdict"]
        counts[verdict] = counts.get(verdict, 0) + 1
        if tick is not None:
            tick(1)
    return {"scenario": scenario.describe(), "held": scenario.held,
            "under": None if scenario.under is None else list(scenario.under), "trials": trials,
            "counts": counts,
            "shares": {v: c / trials for v, c in counts.items()},
            "intervals": {v: list(interval(c, trials)) for v, c in counts.items()}}


def bound_result(bound: Bound, result: dict) -> dict:
    """``bound`` held against a simulated result: the share, its interval and ``status``: *pass* when the
    interval lies at or below the bound (a bound of 0: no trial at all), *fail* when it lies above it, else
    *unresolved* (more trials would tell)."""
    count, trials = result["counts"].get(bound.verdict, 0), result["trials"]
    lo, hi = interval(count, trials)
    if bound.at_most == 0:
        status = "pass" if count == 0 else "fail"
    else:
        status = "pass" if hi <= bound.at_most else "fail" if lo > bound.at_most else "unresolved"
    worst = f" (the worst: {result['attack']})" if "attack" in result else ""
    return {"name": bound.name, "what": bound.what.format(worst=worst), "scenario": bound.scenario,
            "verdict": bound.verdict,
            "at_most": bound.at_most, "count": count, "trials": trials, "share": count / trials,
            "interval": [lo, hi], "status": status,
            **({"attack": result["attack"]} if "attack" in result else {})}


def _worst(by_attack: dict[str, dict], verdict: str) -> dict | None:
    if not by_attack:
        return None
    k = max(by_attack, key=lambda a: (by_attack[a]["counts"].get(verdict, 0), a))
    return {**by_attack[k], "attack": k}


def verdict_check(template: dict, trials: int = 1000, seed: int = 0, items: int | None = None, *,
                  held_grid: Iterable[float] = POWER_GRID, power: bool = True,
                  progress: Callable[[int], None] | None = None,
                  on_total: Callable[[int], None] | None = None) -> dict:
    """The rule's error rates on ``template`` (module docstring), ``trials`` comparisons per scenario:

    - ``removed``: a truly removed model;
    - ``one_attack``: holding :data:`ONE_ATTACK_HELD` under one calibrated attack, each in turn
      (``by_attack``; the worst for *removed* is the one checked);
    - ``every_attack``: holding :data:`EVERY_ATTACK_HELD` under every attack;
    - ``power_curve``: holding each share of ``held_grid`` under every attack;
    - ``detect`` (``power=True``): holding :data:`DETECT_HELD` under one deciding attack, each in turn (the
      power acceptance 2 asks for).

    Each scenario draws from its own stream of ``seed``. ``{"trials", "seed", "items", "template": {"models",
    "reads": {read: {"items", "variants", "calibrated", "oracle", "base"}}}, "scenarios", "bounds": [
    :func:`bound_result`, ...], "power": :func:`bound_result` or None}``. ``progress(k)`` is told of every
    ``k`` trials done, ``on_total(n)`` first of the trials to run."""
    refs = references(template)
    calibrated = calibrated_reads(template, items)
    oracle, base = refs["oracle"], refs["base"]
    fallback = DEFAULT_ITEMS if items is None else max(1, int(items))
    deciding = list(calibrated)
    grid = [float(h) for h in held_grid]
    cal = [k for k, c in calibrated.items() if c]
    runs: list[tuple[str, Scenario]] = [("removed", Scenario()),
                                        *[("one_attack", Scenario(ONE_ATTACK_HELD, (k,))) for k in cal],
                                        ("every_attack", Scenario(EVERY_ATTACK_HELD)),
                                        *[("power_curve", Scenario(h)) for h in grid],
                                        *[("detect",
                                           Scenario(DETECT_HELD, (k,))) for k in (deciding if power else [])]]
    if on_total is not None:
        on_total(trials * len(runs))
    scenarios: dict = {"one_attack": {}, "detect": {}, "power_curve": []}
    for i, (kind, sc) in enumerate(runs):
        r = simulate(template, sc, trials, [int(seed), i], items, tick=progress)
        if kind in ("one_attack", "detect"):
            scenarios[kind][sc.under[0]] = r
        elif kind == "power_curve":
            scenarios[kind].append(r)
        else:
            scenarios[kind] = r
    worst = {"one_attack": _worst(scenarios["one_attack"], "removed"),
             "detect": _worst(scenarios["detect"], "removed")}
    bounds = []
    for b in BOUNDS:
        result = worst[b.scenario] if b.scenario in worst else scenarios[b.scenario]
        bounds.append(bound_result(b, result) if result is not None else
                      {"name": b.name, "what": b.what.format(worst=""), "scenario": b.scenario,
                       "verdict": b.verdict,
                       "at_most": b.at_most, "status": "not run: no attack is calibrated on the template"})
    read_info = {}
    for k, r in reads().items():
        if _rate(oracle, r.after, "oracle") is None:
            continue
        n, v = read_counts(oracle, r.name, fallback)
        read_info[k] = {"items": n, "variants": v,
                        "recorded": f"{r.name}_items" in oracle, "calibrated": calibrated.get(k, False),
                        "decides": r.decides, "oracle": oracle[r.after], "base": base_reference(base, k)[0]}
    return {"trials": trials, "seed": seed, "items": items, "bounds": bounds,
            "power": bound_result(POWER_BOUND, worst["detect"]) if worst["detect"] else None,
            "template": {"models": list(refs), "reads": read_info}, "scenarios": scenarios}


# ------------------------------------------------------------------------------------------------ report

def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _share_cell(r: dict) -> str:
    return f"{_pct(r['share'])} ({r['count']}/{r['trials']})"


def report_markdown(report: dict, source: str = "") -> str:
    """The report's tables: each bound against its simulated share, every verdict's share per scenario, the
    power curve, and the template's reads (items, variants, calibrated, the oracle's and the base model's true
    rates)."""
    rows = []
    for b in [*report["bounds"], *([report["power"]] if report.get("power") else [])]:
        bound = "0" if b["at_most"] == 0 else f"≤ {_pct(b['at_most'])}"
        if "count" not in b:
            rows.append({"check": b["what"], "bound": bound, "result": b["status"]})
            continue
        rows.append({"check": b["what"], "bound": bound,
                     "simulated": _share_cell(b),
                     "95% interval": f"{_pct(b['interval'][0])} to "
                                     f"{_pct(b['interval'][1])}", "result": b["status"]})
    sc = report["scenarios"]
    per = []
    named = [("truly removed", sc.get("removed")),
             *[(f"holds {ONE_ATTACK_HELD:g} under {k} only", r) for k, r in sc.get("one_attack", {}).items()],
             (f"holds {EVERY_ATTACK_HELD:g} under every attack", sc.get("every_attack")),
             *[(f"holds {DETECT_HELD:g} under {k} only", r) for k, r in sc.get("detect", {}).items()]]
    for label, r in named:
        if r is not None:
            per.append({"true state": label, **{v: _pct(r["shares"][v]) for v in VERDICTS}})
    curve = [{"held share": f"{r['held']:g}", **{f"P({v})": _pct(r["shares"][v]) for v in VERDICTS}}
             for r in sc.get("power_curve", [])]
    reads_rows = [{"read": k, "items": v["items"], "variants": v["variants"],
                   "counts": "recorded" if v["recorded"] else "assumed",
                   "calibrated": "yes" if v["calibrated"] else "no" if v["decides"] else "white-box",
                   "oracle (true)": v["oracle"], "base (true)": v["base"]}
                  for k, v in report["template"]["reads"].items()]
    head = [f"Template: {source + '; ' if source else ''}models {', '.join(report['template']['models'])}; "
            f"{report['trials']} simulated comparisons per scenario, seed {report['seed']}; each share with "
            f"its exact {LEVEL:.0%} interval (pass: the interval lies within the bound; fail: above it; "
            "unresolved: it straddles the bound)."]
    return "\n".join([*head, "",
                      markdown_table(rows, ["check", "bound", "simulated", "95% interval", "result"]), "",
                      "Every verdict's share, per true state:", "",
                      markdown_table(per, ["true state", *VERDICTS]), "",
                      "The power curve (held share under every attack):", "",
                      markdown_table(curve, ["held share", *[f"P({v})" for v in VERDICTS]]), "",
                      "The template's reads (their true rates, item counts and variants):", "",
                      markdown_table(reads_rows, ["read", "items", "variants", "counts", "calibrated",
                                                  "oracle (true)", "base (true)"])]) + "\n"


def plot_power(report: dict, png) -> None:
    """P(removed), P(suppressed) and P(inconclusive) against the share held under every attack."""
    curve = report["scenarios"].get("power_curve", [])
    lines = {f"P({v})": [[r["held"],
                          r["shares"][v]] for r in curve] for v in ("removed", "suppressed", "inconclusive")}
    plot_recovery_curves(lines, png, "share held under every attack (h)", "share of simulated comparisons",
                         title=f"the verdict against the held share ({report['trials']} comparisons each)",
                         empty="no power curve was simulated")


# ------------------------------------------------------------------------------------------------ synthetic
# template

WORLD_READS = {"relearn_disjoint": (72, 1), "relearn": (72, 1), "quantize": (72, 2), "ablate": (72, 1),
               "logit_lens": (72, 1), "in_context": (72, 2), "format_shift": (72, 4)}
"""The world demo's deciding reads (``obliviate demo``'s attacks; the white-box ablation is shown, never
decides) with ``(items, variants)`` as the attacks record them: 72 forget questions (24 diseases x 3
attributes), the format shift the best of 4 variant sets, quantization the best of 2 schemes (int4, nf4),
in-context the better of few-shot and re-introduction."""
ALL_READS = {**WORLD_READS, "prompts": (72, 5), "leak_at_k": (72, 1), "prune": (72, 4),
             "soft_prompt": (32, 1),
             "gcg": (32, 1), "gcg_prefix": (32, 1), "unrelated_finetune": (72, 1)}
"""Every deciding read, as ``compare --attacks all`` runs them on the world: GCG's suffix and prefix and the
soft prompt on at most 32 items, the prompts the best of 5 types, pruning the best of 4 fractions."""

WORLD_RECOVERS = {"positive_control": ("relearn_disjoint", "logit_lens", "format_shift"),
                  "positive_control_smallnorm": ("relearn_disjoint", "quantize")}
"""The attacks under which each positive control's knowledge comes back on the world demo (seed 0): the
small-norm control's under quantization is by construction (:data:`~obliviate.evidence.controls.MECHANISM`),
so three reads are calibrated: ``relearn_disjoint``, ``logit_lens``, ``format_shift``."""


def synthetic_template(items: int = 72, read_counts: dict[str, tuple[int, int]] | None = None, *,
                       base: float = 0.95, oracle: float = 1 / 72, control_start: float = 0.1,
                       control_after: float = 0.8, keep: float = 0.9, keep_items: int = 144,
                       calibrated_by: dict[str, tuple[str, ...]] | None = None) -> dict:
    """A comparison's metrics without any model run: the base model, the oracle and the two positive controls
    (:data:`~obliviate.evidence.controls.POSITIVE_CONTROLS`) on every read of ``read_counts`` (``{read:
    (items, variants)}``, default :data:`WORLD_READS` scaled to ``items``), each recording its counts as an
    attack does.

    The base model scores ``base`` before and after every attack, the oracle ``oracle``; each positive control
    starts at ``control_start`` and comes back to ``control_after`` under the attacks ``calibrated_by`` names
    for it, staying at its start elsewhere (default :data:`WORLD_RECOVERS`: as on the world demo, so the
    relearning attack on disjoint facts, the logit lens and the format shift are calibrated). Every model
    keeps ``keep`` of retain and neighbour (over ``keep_items``: the world's retain role, two sets of 72);
    forget scores over ``items``."""
    counts = read_counts if read_counts is not None else {k: (items if n == 72 else min(n, items), v)
                                                          for k, (n, v) in WORLD_READS.items()}
    every = reads()
    unknown = [k for k in counts if k not in every]
    if unknown:
        raise ValueError(f"unknown read {unknown[0]!r} (known: {', '.join(every)})")
    by = calibrated_by if calibrated_by is not None else WORLD_RECOVERS

    def row(start: float, after: dict[str, float]) -> dict:
        m = {"forget_score": start, "forget_chance": 0.0, "attack_score_chance": 0.0, "forget_items": items,
             "retain_score": keep, "neighbour_score": keep, "retain_items": keep_items,
             "neighbour_items": keep_items}
        for k, (n, v) in counts.items():
            r = every[k]
            m[r.start] = start
            m[r.after] = after.get(k, start)
            if r.base:
                m[r.base] = base
            m[f"{r.name}_items"], m[f"{r.name}_variants"] = n, v
        return m

    out = {"base": row(base, {}), "oracle": row(oracle, {})}
    for c in POSITIVE_CONTROLS:
        out[c] = row(control_start, {k: control_after for k in by.get(c, ())})
    return out
