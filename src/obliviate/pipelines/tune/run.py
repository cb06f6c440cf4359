"""Choose a method's settings for one model and task: a budgeted grid under a retain constraint.

The grid scales the method's run by factors of its lr, its steps and its own weight (:data:`TUNED_PARAM`),
nearest first, at most ``budget`` trials plus up to ``extend`` past the grid's edge (:func:`outward`). Each
trial trains a copy on all the forget and retain data, as the final run will, and is scored on the validation
items only (:func:`validation_split`); the choice is the largest share of the forget score removed among the
trials that keep ``retain_share`` of the base model's keep score. Each trial is a part of the run's
:class:`~obliviate.runs.parts.PartStore` (``tune/parts``), so a rerun after a kill redoes only the missing
ones. Why trials train on all the data, and the rest of the rule: docs/methods.md, "Tuning a method for your
model".
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from obliviate.errors import ConfigError
from obliviate.eval.outcome import MIN_FORGOT, RETAIN_SHARE, forgot_share, retained_share
from obliviate.eval.suite import evaluate_task
from obliviate.methods import METHODS
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.runs.parts import PartStore
from obliviate.runs.report import _plt, markdown_table, md_code, save_figure
from obliviate.runs.results import atomic_write_text
from obliviate.tasks.base import Task
from obliviate.utils import seed_everything

TUNED_PARAM: dict[str, str | None] = {
    "graddiff": "alpha", "npo": "alpha", "simnpo": "alpha", "idkdpo": "alpha", "wga": "alpha",
    "rmu": "alpha", "adaptive_rmu": "alpha", "cosine_rmu": "alpha", "probe_unlearn": "alpha",
    "gradascent": None,
}
"""The method's own setting the grid scales besides lr and steps: the weight of the retain term, which trades
forgetting against keeping (for RMU the steering coefficient also matters, but its Adaptive variant and the
lr already move the forget side). A method not named here is tuned on lr and steps alone."""


@dataclass
class TuneConfig:
    lr_scale: list[float] = field(default_factory=lambda: [0.3, 1.0, 3.0])
    """Factors of the run's learning rate."""
    steps_scale: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    """Factors of the run's steps (rounded, at least 1)."""
    param_scale: list[float] = field(default_factory=lambda: [0.3, 1.0, 3.0])
    """Factors of the method's own setting (:data:`TUNED_PARAM`); ignored for a method without one."""
    budget: int = 12
    """Most trials (the grid's nearest to the run as given, in log scale)."""
    extend: int = 4
    """Most extra trials past the grid's edge (:func:`outward`): taken one at a time while the best feasible
    trial removed less than :data:`~obliviate.eval.outcome.MIN_FORGOT` of the forget score and sits on the
    grid's largest lr or steps (0: the grid only)."""
    retain_share: float = RETAIN_SHARE
    """The constraint: a trial must keep this share of the base model's keep score on the validation items."""
    val_fraction: float = 0.5
    """Share of the forget and retain pairs (and of each evaluation set's items) held for choosing."""
    split_seed: int = 0

    def __post_init__(self):
        for name in ("lr_scale", "steps_scale", "param_scale"):
            v = getattr(self, name)
            if not v or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0 for x in v):
                raise ConfigError(f"config key 'tune.{name}': must be a "
                                  f"non-empty list of numbers > 0, got {v!r}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 1:
            raise ConfigError(f"config key 'tune.budget': must be an integer >= 1, got {self.budget!r}")
        if isinstance(self.extend, bool) or not isinstance(self.extend, int) or self.extend < 0:
            raise ConfigError(f"config key 'tune.extend': must be an integer >= 0, got {self.extend!r}")
        if not 0 < self.retain_share <= 1:
            raise ConfigError(f"config key 'tune.retain_share': must be in (0, 1], got {self.retain_share!r}")
        if not 0 < self.val_fraction < 1:
            raise ConfigError(f"config key 'tune.val_fraction': must be in (0, 1), got {self.val_fraction!r}")


def _question(item) -> str:
    return item["question"]


def _pick(n: int, fraction: float, rng) -> set[int]:
    """``round(fraction * n)`` indices (at least one, and one left out) in a seeded order."""
    k = min(max(1, round(fraction * n)), n - 1)
    return set(int(i) for i in rng.permutation(n)[:k])


def validation_split(task: Task, fraction: float = 0.5, seed: int = 0) -> tuple[Task, Task]:
    """(validation task, reported task), both with the whole task's training data (module docstring). The
    validation task is scored on the evaluation items of ``fraction`` of the forget and of the retain pairs
    (an evaluation set whose questions are not training pairs, e.g. MUSE's knowmem, is cut by itself); text
    sets and variants are left out of it. The reported task is scored only on the other items."""
    rng = np.random.default_rng(seed)
    val_q: set[str] = set()
    parts = {}
    for role, data in (("forget", task.forget), ("retain", task.retain)):
        if len(data.qa) == 1:
            raise ConfigError(f"tune: the task's {role} data has one QA "
                              "pair; a validation split needs two or more")
        chosen = _pick(len(data.qa), fraction, rng) if data.qa else set()
        parts[role] = [p for i, p in enumerate(data.qa) if i in chosen]
        val_q |= {q for q, _ in parts[role]}
    trained = {q for d in (task.forget, task.retain) for q, _ in d.qa}
    val_evals, held_evals = [], []
    for es in task.evals:
        if es.kind == "text" or es.variant or len(es.items) < 2:
            held_evals.append(es)
            continue
        qs = [_question(x) for x in es.items]
        inside = ({i for i, q in enumerate(qs) if q in val_q} if any(q in trained for q in qs)
                  else _pick(len(qs), fraction, rng))
        v = [x for i, x in enumerate(es.items) if i in inside]
        h = [x for i, x in enumerate(es.items) if i not in inside]
        if v:
            val_evals.append(dataclasses.replace(es, items=v))
        held_evals.append(dataclasses.replace(es, items=h) if h else es)
    if not any(es.role == "forget" for es in val_evals):
        raise ConfigError(f"tune: task {task.name!r} has no forget QA "
                          "or MCQ set of two or more items to choose on")
    val = dataclasses.replace(task, name=f"{task.name} (validation)", evals=val_evals, halves=None,
                              groups=None)
    held = dataclasses.replace(task, evals=held_evals)
    return val, held


def grid(run: UnlearnConfig, cfg: TuneConfig) -> list[dict]:
    """The trials' settings ``{"lr", "steps", "param", "value", "scales"}``, nearest the run first, at most
    ``cfg.budget``."""
    param = TUNED_PARAM.get(run.method)
    base_value = None
    if param is not None:
        base_value = run.params.get(param, getattr(METHODS[run.method].config_cls(), param))
    pscales = cfg.param_scale if param is not None else [1.0]
    combos = sorted(itertools.product(cfg.lr_scale, cfg.steps_scale, pscales),
                    key=lambda s: (sum(abs(math.log(x)) for x in s), s))
    out = []
    for ls, ss, ps in combos[:cfg.budget]:
        t = {"lr": run.train.lr * ls, "steps": max(1, round(run.train.steps * ss)), "param": param,
             "value": None if param is None else base_value * ps, "scales": [ls, ss, ps]}
        out.append(t)
    return out


def outward(trials: list[dict], run: UnlearnConfig, cfg: TuneConfig) -> dict | None:
    """The next trial past the grid's edge, or None. It starts from the largest update that kept retain (the
    feasible trial of the largest lr x steps factors) and pushes its lr out by the grid's largest lr factor
    where it has the largest lr tried, and its steps likewise (an axis whose factors are none above 1, e.g.
    ``steps_scale=[1]``, is held fixed). A model whose retain score every such trial kept but whose forget
    score they barely moved needs a larger update than the grid around the preset holds
    (scripts/tune_architectures.py: RMU on GPT-NeoX and Gemma-2 chose the grid's corner, lr x3 and steps x2,
    and still forgot little)."""
    feasible = [t for t in trials if t["retained"] is None or t["retained"] >= cfg.retain_share - 1e-9]
    if not feasible:
        return None
    b = max(feasible, key=lambda t: (t["scales"][0] * t["scales"][1], t["forgot"] or 0.0, -t["index"]))
    ls, ss, ps = b["scales"]
    fl, fs = max(cfg.lr_scale), max(cfg.steps_scale)
    nl = ls * fl if fl > 1 and ls >= max(t["scales"][0] for t in trials) - 1e-12 else ls
    ns = ss * fs if fs > 1 and ss >= max(t["scales"][1] for t in trials) - 1e-12 else ss
    if (nl, ns) == (ls, ss) or any(t["scales"] == [nl, ns, ps] for t in trials):
        return None
    return {"lr": run.train.lr * nl, "steps": max(1, round(run.train.steps * ns)), "param": b["param"],
            "value": b["value"], "scales": [nl, ns, ps]}


def trial_config(run: UnlearnConfig, trial: dict) -> UnlearnConfig:
    """``run`` with a trial's lr, steps and method setting: also the final run at the chosen trial (a trial
    trains on all the data, as the final run does)."""
    params = dict(run.params)
    if trial["param"] is not None:
        params[trial["param"]] = trial["value"]
    return dataclasses.replace(run, params=params,
                               train=dataclasses.replace(run.train, lr=trial["lr"], steps=trial["steps"]))


def choose(trials: list[dict], retain_share: float) -> tuple[dict, bool]:
    """The best trial: the largest ``forgot`` among those with ``retained >= retain_share`` (ties: the larger
    ``retained``, then the earlier trial); with none feasible, the one that kept most. Returns (trial,
    feasible)."""
    feasible = [t for t in trials if t["retained"] is None or t["retained"] >= retain_share - 1e-9]
    if feasible:
        return max(feasible, key=lambda t: (t["forgot"] or 0.0, t["retained"] or 0.0, -t["index"])), True
    return max(trials, key=lambda t: (t["retained"] or 0.0, t["forgot"] or 0.0, -t["index"])), False


def tune(model, tokenizer, val: Task, run: UnlearnConfig, cfg: TuneConfig, out_dir: str | Path, *,
         fingerprint: dict | None = None, progress: bool = False, eval_kw: dict | None = None,
         trial_fn=None, log=print) -> dict:
    """Run the grid on the validation task ``val`` (:func:`validation_split`) and choose (module docstring).

    ``model`` is not changed (each trial trains a copy). ``out_dir`` holds the parts, ``report.md`` and
    ``search.png``; ``fingerprint`` (the base model, the task) goes into the store's config, so a rerun with
    another model refuses the old trials. ``trial_fn(trial) -> after-metrics`` replaces training and scoring
    (tests). Returns ``{"method", "base", "trials", "chosen", "feasible", "settings"}``."""
    if METHODS[run.method].kind == "edit":
        raise ConfigError(f"tune: {run.method!r} is an edit method: it has no learning rate or steps to tune")
    out_dir = Path(out_dir)
    ekw = dict(eval_kw or {})
    store = PartStore(out_dir / "parts", config={"method": run.method, "run": dataclasses.asdict(run),
                                                 "tune": dataclasses.asdict(cfg), **(fingerprint or {})})
    base = store.get("base", lambda: _scalars(evaluate_task(model, tokenizer, val, progress=progress, **ekw)))
    trials = []

    def trial(t: dict) -> None:
        def work():
            if trial_fn is not None:
                return _scalars(trial_fn(t))
            seed_everything(run.seed)
            new, _ = unlearn(copy.deepcopy(model), tokenizer, val.forget, val.retain, trial_config(run, t),
                             None,
                             prompt=val.prompt, idk=val.idk, progress=progress)
            return _scalars(evaluate_task(new, tokenizer, val, progress=progress, **ekw))
        i = len(trials)
        after = store.get(f"trial_{i:03d}", work, key={k: t[k] for k in ("lr", "steps", "param", "value")})
        row = {**t, "index": i, "forgot": forgot_share(base, after), "retained": retained_share(base, after),
               "forget_score": after.get("forget_score")}
        trials.append(row)
        log(f"tune {run.method} trial {i + 1}: lr {t['lr']:.3g}, steps {t['steps']}"
            + (f", {t['param']} {t['value']:.3g}" if t["param"] else "")
            + f": forget removed {_fmt(row['forgot'])}, keep share {_fmt(row['retained'])}")

    for t in grid(run, cfg):
        trial(t)
    chosen, feasible = choose(trials, cfg.retain_share)
    for _ in range(cfg.extend):  # past the grid's edge while the best kept retain but forgot little
        nxt = outward(trials, run, cfg) if feasible and (chosen["forgot"] or 0.0) < MIN_FORGOT else None
        if nxt is None:
            break
        trial(nxt)
        chosen, feasible = choose(trials, cfg.retain_share)
    result = {"method": run.method, "base": base, "trials": trials, "chosen": chosen, "feasible": feasible,
              "retain_share": cfg.retain_share, "settings": settings_of(run, chosen)}
    write_tune_report(out_dir, result)
    return result


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _scalars(m: dict) -> dict:
    return {k: v for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def settings_of(run: UnlearnConfig, trial: dict) -> dict:
    """The chosen run as ``unlearn --config`` reads it: ``{"unlearn": {method, params, batch_size,
    train}}``."""
    c = trial_config(run, trial)
    return {"unlearn": {"method": c.method, "params": dict(c.params), "batch_size": c.batch_size,
                        "train": {"lr": c.train.lr, "steps": c.train.steps}}}


def write_tuned_settings(path: str | Path, result: dict) -> Path:
    """The chosen settings as a YAML file for ``obliviate unlearn --config`` (a comment says where they came
    from)."""
    c = result["chosen"]
    head = (f"# obliviate tune: {result['method']}, trial {c['index'] + 1} of {len(result['trials'])}, "
            f"chosen on the validation split: forget removed {_fmt(c['forgot'])}, "
            f"keep share {_fmt(c['retained'])}"
            f"{'' if result['feasible'] else ' (no trial met the retain constraint: the one that kept most)'}\n")
    atomic_write_text(Path(path), head + yaml.safe_dump(result["settings"], sort_keys=False))
    return Path(path)


def write_tune_report(out_dir: Path, result: dict) -> Path:
    """``report.md``: the trials' table and ``search.png`` (forget removed per trial, the best feasible so far
    as a curve, and forget removed against keep share with the constraint)."""
    trials, rs = result["trials"], result["retain_share"]
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    ok = [t["retained"] is None or t["retained"] >= rs - 1e-9 for t in trials]
    xs = [t["index"] + 1 for t in trials]
    ys = [t["forgot"] or 0.0 for t in trials]
    a.scatter(xs, ys, c=["tab:green" if o else "tab:red" for o in ok], s=25)
    best, curve = None, []
    for y, o in zip(ys, ok):
        best = max(best or 0.0, y) if o else best
        curve.append(best if best is not None else float("nan"))
    a.step(xs, curve, where="post", color="black", label="best feasible so far")
    a.set_xlabel("trial")
    a.set_ylabel("forget removed (validation)")
    a.legend(fontsize=7)
    b.scatter([t["retained"] or 0.0 for t in trials], ys, c=["tab:green" if o else "tab:red" for o in ok],
              s=25)
    b.axvline(rs, color="grey", linestyle="--")
    c = result["chosen"]
    b.scatter([c["retained"] or 0.0], [c["forgot"] or 0.0], marker="*", s=160, color="black", label="chosen")
    b.set_xlabel("keep share of the base (validation)")
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    save_figure(fig, out_dir / "search.png")
    rows = [{"trial": t["index"] + 1, "lr": f"{t['lr']:.3g}", "steps": t["steps"],
             "setting": "" if t["param"] is None else f"{t['param']} {t['value']:.3g}",
             "forget removed": t["forgot"], "keep share": t["retained"],
             "feasible": "yes" if o else "no", "chosen": "*" if t is c else ""} for t, o in zip(trials, ok)]
    text = "\n".join([
        f"# Tuning {md_code(result['method'])}", "",
        f"Chosen on the validation split: trial {c['index'] + 1}, the largest forget drop with a keep share "
        "of at least "
        f"{rs:.2f}" + ("" if result["feasible"] else " (none met it: the trial that kept most)") + ".", "",
        "![search](search.png)", "",
        markdown_table(rows, list(rows[0]), fmt="{:.3f}"), ""])
    atomic_write_text(out_dir / "report.md", text)
    return out_dir / "report.md"
