"""Choose a method's settings for one model and task: a budgeted grid under a keep constraint.

The grid is the method's own search space (``search`` at its ``@register``: factors of its lr, its steps and
its own settings; :func:`search_space`), nearest the run as given first, at most ``budget`` trials (24) plus
up to ``extend`` past the grid's edge (:func:`outward`). Each trial trains a copy on all the forget and retain
data, as the final run will, and is scored on the validation items only (:func:`validation_split`); the
choice is :func:`choose`'s one rule: the lowest forget score among the trials that keep ``retain_share`` (0.9)
of the base model's retain score and of its neighbour score, else the best trade-off, marked as such. Each
trial is a part of the run's :class:`~obliviate.runs.parts.PartStore` (``tune/parts``), so a rerun after a
kill redoes only the missing ones. Why trials train on all the data, and the rest of the rule:
docs/methods.md, "Tuning a method for your model".
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from obliviate.errors import ConfigError
from obliviate.eval.outcome import MIN_FORGOT, RETAIN_SHARE, forgot_share, retained_share, verdict_score
from obliviate.eval.suite import evaluate_task
from obliviate.methods import METHODS
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.runs.parts import PartStore
from obliviate.runs.report import _plt, markdown_table, md_code, save_figure
from obliviate.runs.results import atomic_write_text
from obliviate.tasks.base import Task
from obliviate.utils import seed_everything

@dataclass
class TuneConfig:
    space: dict = field(default_factory=dict)
    """Axes that replace or add to the method's own search space (``search`` at its ``@register``), each a
    list of factors of the run's value: ``tune.space.lr=[0.3,1,3]``, ``tune.space.steps=[1]`` (held fixed),
    ``tune.space.beta=[0.5,1,2]`` (a numeric setting of the method's config)."""
    budget: int = 24
    """Most trials (the grid's nearest to the run as given, in log scale): the same for every method."""
    extend: int = 4
    """Most extra trials past the grid's edge (:func:`outward`): taken one at a time while the best feasible
    trial removed less than :data:`~obliviate.eval.outcome.MIN_FORGOT` of the forget score and sits on the
    grid's largest lr or steps (0: the grid only, as ``compare --tune`` does, so that every method gets the
    same budget)."""
    retain_share: float = RETAIN_SHARE
    """The constraint: a trial must keep this share of the base model's retain score and of its neighbour
    score on the validation items (:func:`choose`)."""
    val_fraction: float = 0.5
    """Share of the forget and retain pairs (and of each evaluation set's items) held for choosing."""
    split_seed: int = 0

    def __post_init__(self):
        if not isinstance(self.space, dict):
            raise ConfigError(f"config key 'tune.space': must be a mapping of axis -> list of factors, "
                              f"got {self.space!r:.80}")
        for name, v in self.space.items():
            if (not isinstance(v, (list, tuple)) or not v
                    or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0 for x in v)):
                raise ConfigError(f"config key 'tune.space.{name}': must be a "
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


def search_space(method: str, cfg: TuneConfig) -> dict[str, list[float]]:
    """The axes the grid scales, lr and steps first: the method's own ``search``
    (:func:`~obliviate.unlearning.contract.check_search`), with ``cfg.space``'s axes replacing or adding to
    it. A method with none and no ``tune.space`` is refused in one line; so is an axis that is neither lr,
    steps nor a numeric field of the method's config."""
    cls = METHODS[method]
    if cls.kind == "edit":
        raise ConfigError(f"tune: {method!r} is an edit method: it has no learning rate or steps to tune")
    if cls.search is None and not cfg.space:
        raise ConfigError(f"tune: method {method!r} documents no search space (`search=` at its @register); "
                          "give one as tune.space.lr=[0.3,1,3] tune.space.steps=[0.5,1,2] ...")
    defaults = cls.config_cls()
    for axis in cfg.space:
        v = getattr(defaults, axis, None)
        if axis not in ("lr", "steps") and (isinstance(v, bool) or not isinstance(v, (int, float))):
            numeric = sorted(f.name for f in dataclasses.fields(cls.config_cls)
                             if isinstance(getattr(defaults, f.name), (int, float))
                             and not isinstance(getattr(defaults, f.name), bool))
            raise ConfigError(f"config key 'tune.space.{axis}': not lr, steps or a numeric setting of "
                              f"{method!r} (its numeric settings: {', '.join(numeric) or 'none'})")
    space = {**(cls.search or {}), **{k: [float(x) for x in v] for k, v in cfg.space.items()}}
    return {"lr": space.get("lr", [1.0]), "steps": space.get("steps", [1.0]),
            **{k: v for k, v in space.items() if k not in ("lr", "steps")}}


def _scaled(base, factor: float, name: str, method: str):
    """``base * factor`` (an integer setting rounded, at least 1); a setting that is not a number > 0 cannot
    be scaled: one line naming it."""
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 0:
        raise ConfigError(f"tune: {method!r}'s {name} is {base!r}: a search axis scales a number > 0 (set it, "
                          f"or drop the axis with tune.space.{name}=[1])")
    return max(1, round(base * factor)) if isinstance(base, int) else float(base * factor)


def grid(run: UnlearnConfig, cfg: TuneConfig) -> list[dict]:
    """The trials' settings ``{"lr", "steps", "params", "scales"}`` (``scales``: the factors, in
    :func:`search_space`'s order), nearest the run first (the sum of |log factor|), at most ``cfg.budget``
    distinct ones."""
    space = search_space(run.method, cfg)
    names = [a for a in space if a not in ("lr", "steps")]
    defaults = METHODS[run.method].config_cls()
    base = {p: run.params.get(p, getattr(defaults, p)) for p in names}
    combos = sorted(itertools.product(*space.values()), key=lambda s: (sum(abs(math.log(x)) for x in s), s))
    out, seen = [], set()
    for scales in combos:
        if len(out) == cfg.budget:
            break
        ls, ss, *ps = scales
        t = {"lr": run.train.lr * ls, "steps": max(1, round(run.train.steps * ss)),
             "params": {p: (base[p] if f == 1 else _scaled(base[p], f, p, run.method)) for p, f in zip(names, ps)},
             "scales": list(scales)}
        key = json.dumps({k: t[k] for k in ("lr", "steps", "params")}, sort_keys=True)
        if key not in seen:  # steps rounded to the same number: one trial
            seen.add(key)
            out.append(t)
    return out


def outward(trials: list[dict], run: UnlearnConfig, cfg: TuneConfig) -> dict | None:
    """The next trial past the grid's edge, or None. It starts from the largest update that kept retain (the
    feasible trial of the largest lr x steps factors) and pushes its lr out by the grid's largest lr factor
    where it has the largest lr tried, and its steps likewise (an axis whose factors are none above 1, e.g.
    ``tune.space.steps=[1]``, is held fixed). A model whose retain score every such trial kept but whose forget
    score they barely moved needs a larger update than the grid around the preset holds
    (scripts/tune_architectures.py: RMU on GPT-NeoX and Gemma-2 chose the grid's corner, lr x3 and steps x2,
    and still forgot little)."""
    feasible = [t for t in trials if meets(t, cfg.retain_share)]
    if not feasible:
        return None
    space = search_space(run.method, cfg)
    b = max(feasible, key=lambda t: (t["scales"][0] * t["scales"][1], t["forgot"] or 0.0, -t["index"]))
    ls, ss, *ps = b["scales"]
    fl, fs = max(space["lr"]), max(space["steps"])
    nl = ls * fl if fl > 1 and ls >= max(t["scales"][0] for t in trials) - 1e-12 else ls
    ns = ss * fs if fs > 1 and ss >= max(t["scales"][1] for t in trials) - 1e-12 else ss
    if (nl, ns) == (ls, ss) or any(t["scales"] == [nl, ns, *ps] for t in trials):
        return None
    return {"lr": run.train.lr * nl, "steps": max(1, round(run.train.steps * ns)), "params": dict(b["params"]),
            "scales": [nl, ns, *ps]}


def trial_config(run: UnlearnConfig, trial: dict) -> UnlearnConfig:
    """``run`` with a trial's lr, steps and method settings: also the final run at the chosen trial (a trial
    trains on all the data, as the final run does)."""
    return dataclasses.replace(run, params={**run.params, **trial["params"]},
                               train=dataclasses.replace(run.train, lr=trial["lr"], steps=trial["steps"]))


KEEP_ROLES = ("retain", "neighbour")
"""The scores the constraint keeps: what the method should not touch (retain) and the facts nearest the forget
set (neighbour), each read through :func:`~obliviate.eval.outcome.verdict_score`."""

_EPS = 1e-9


def keep_shares(base: dict, after: dict) -> dict[str, float | None]:
    """Each of :data:`KEEP_ROLES`' share of the base model's score, ``after / base`` (None where the base is
    0); a role the task does not score is left out. A task with neither: ``{"keep": ...}``, the share of
    :func:`~obliviate.eval.outcome.outcome_keep` (its utility score)."""
    out: dict[str, float | None] = {}
    for role in KEEP_ROLES:
        b, a = verdict_score(base, role), verdict_score(after, role)
        if b is not None and a is not None:
            out[role] = float(a / b) if b > 0 else None
    return out or {"keep": retained_share(base, after)}


def meets(trial: dict, share: float) -> bool:
    """Whether a trial keeps ``share`` of every keep score it has (:func:`keep_shares`; one it could not
    measure, None, does not count against it)."""
    return all(v is None or v >= share - _EPS for v in trial["keep"].values())


def worst_keep(trial: dict) -> float:
    """The lowest of a trial's keep shares (1 where it has none)."""
    vals = [v for v in trial["keep"].values() if v is not None]
    return min(vals) if vals else 1.0


SELECTION_RULE = ("the lowest forget score (the largest share of it removed, down to chance) among the trials "
                  "that keep at least {share:.2f} of the base model's retain and neighbour scores, ties to the "
                  "larger worst keep share, then the earlier trial; with none that does, the best trade-off: "
                  "the trial nearest the constraint (the largest worst keep share), ties to the lower forget "
                  "score, marked as not meeting it")
"""The one rule :func:`choose` applies, as the reports and docs/results.md state it."""


def choose(trials: list[dict], retain_share: float) -> tuple[dict, bool]:
    """The chosen trial and whether it meets the constraint, by :data:`SELECTION_RULE`. Each trial has
    ``forgot`` (the share of the forget score removed, :func:`~obliviate.eval.outcome.forgot_share`), ``keep``
    (:func:`keep_shares`) and ``index``. Among the trials that keep ``retain_share`` of every keep score
    (:func:`meets`): the largest ``forgot``, ties to the larger :func:`worst_keep`, then the earlier trial.
    With none: the largest worst keep share (the trial nearest the constraint, whose forget score is read at
    the least damage the method did), ties to the larger ``forgot``, then the earlier trial; ``False`` says
    so."""
    if not trials:
        raise ConfigError("tune: no trial to choose from (the grid is empty)")
    feasible = [t for t in trials if meets(t, retain_share)]
    if feasible:
        return max(feasible, key=lambda t: (t["forgot"] or 0.0, worst_keep(t), -t["index"])), True
    return max(trials, key=lambda t: (worst_keep(t), t["forgot"] or 0.0, -t["index"])), False


def setting_text(trial: dict) -> str:
    """``lr 0.001, steps 50, alpha 10``: a trial's settings in one phrase."""
    return ", ".join([f"lr {trial['lr']:.3g}", f"steps {trial['steps']}",
                      *(f"{k} {v:.3g}" for k, v in trial["params"].items())])


def keep_text(trial: dict) -> str:
    """``retain keep 0.950, neighbour keep 0.910``."""
    return ", ".join(f"{k} keep {_fmt(v)}" for k, v in trial["keep"].items())


def tune(model, tokenizer, val: Task, run: UnlearnConfig, cfg: TuneConfig, out_dir: str | Path, *,
         fingerprint: dict | None = None, progress: bool = False, eval_kw: dict | None = None,
         trial_fn=None, log=print) -> dict:
    """Run the grid on the validation task ``val`` (:func:`validation_split`) and choose (module docstring).

    ``model`` is not changed (each trial trains a copy). ``out_dir`` holds the parts, ``report.md`` and
    ``search.png``; ``fingerprint`` (the base model, the task) goes into the store's config, so a rerun with
    another model refuses the old trials. ``trial_fn(trial) -> after-metrics`` replaces training and scoring
    (tests). Returns ``{"method", "base", "trials", "chosen", "feasible", "settings"}``."""
    space = search_space(run.method, cfg)  # an edit method, or one without a search space: one line, here
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
        after = store.get(f"trial_{i:03d}", work, key={k: t[k] for k in ("lr", "steps", "params")})
        row = {**t, "index": i, "forgot": forgot_share(base, after), "keep": keep_shares(base, after),
               **{f"{r}_score": verdict_score(after, r) for r in ("forget", *KEEP_ROLES)}}
        row["retained"] = worst_keep(row) if any(v is not None for v in row["keep"].values()) else None
        trials.append(row)
        log(f"tune {run.method} trial {i + 1}: {setting_text(t)}: forget removed {_fmt(row['forgot'])}, "
            f"{keep_text(row)}")

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
              "retain_share": cfg.retain_share, "space": space, "budget": cfg.budget,
              "settings": settings_of(run, chosen)}
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
            f"chosen on the validation split: forget removed {_fmt(c['forgot'])}, {keep_text(c)}"
            f"{'' if result['feasible'] else ' (no trial met the keep constraint: the best trade-off)'}\n")
    atomic_write_text(Path(path), head + yaml.safe_dump(result["settings"], sort_keys=False))
    return Path(path)


def write_tune_report(out_dir: Path, result: dict) -> Path:
    """``report.md``: the trials' table and ``search.png`` (forget removed per trial, the best feasible so far
    as a curve, and forget removed against keep share with the constraint)."""
    trials, rs = result["trials"], result["retain_share"]
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    ok = [meets(t, rs) for t in trials]
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
    b.scatter([worst_keep(t) for t in trials], ys, c=["tab:green" if o else "tab:red" for o in ok], s=25)
    b.axvline(rs, color="grey", linestyle="--")
    c = result["chosen"]
    b.scatter([worst_keep(c)], [c["forgot"] or 0.0], marker="*", s=160, color="black", label="chosen")
    b.set_xlabel("worst keep share of the base (validation)")
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    save_figure(fig, out_dir / "search.png")
    roles = list(dict.fromkeys(k for t in trials for k in t["keep"]))
    rows = [{"trial": t["index"] + 1, "lr": f"{t['lr']:.3g}", "steps": t["steps"],
             "settings": ", ".join(f"{k} {v:.3g}" for k, v in t["params"].items()),
             "forget removed": t["forgot"], **{f"{r} keep": t["keep"].get(r) for r in roles},
             "feasible": "yes" if o else "no", "chosen": "*" if t is c else ""} for t, o in zip(trials, ok)]
    space = "; ".join(f"{k} x {', '.join(f'{x:g}' for x in v)}" for k, v in result.get("space", {}).items())
    text = "\n".join([
        f"# Tuning {md_code(result['method'])}", "",
        f"Search space (factors of the run as given): {space}; {len(trials)} trials.", "",
        f"Chosen on the validation split: trial {c['index'] + 1}, by the rule: "
        + SELECTION_RULE.format(share=rs) + "."
        + ("" if result["feasible"] else " No trial met the constraint: this is the best trade-off."), "",
        "![search](search.png)", "",
        markdown_table(rows, list(rows[0]), fmt="{:.3f}"), ""])
    atomic_write_text(out_dir / "report.md", text)
    return out_dir / "report.md"
