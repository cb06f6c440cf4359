"""The one attack suite, for every task (the world included): :func:`run_task_attacks` runs every registered
attack (:mod:`obliviate.attacks.attack`; one file each) that is on and has its data, in the order of
:mod:`~obliviate.evidence.attack_table`; :class:`TaskAttackConfig` holds each attack's config under its name
and the settings they share (docs/evaluation.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
import logging
import time
from pathlib import Path
from typing import Any

from obliviate.attacks.attack import ATTACKS, Attack, AttackRun
from obliviate.attacks.cost import counting
from obliviate.attacks.relearn import check_grid
from obliviate.attacks.scoring import forget_chance, forget_score_fn
from obliviate.config import deep_merge, from_dict, from_fields, to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.evidence.attack_table import in_order, on_by_default
from obliviate.models.layers import count_passes
from obliviate.runs.cost import stage_record
from obliviate.tasks.base import Task
from obliviate.train.distributed import is_main_process

log = logging.getLogger(__name__)


@dataclass
class TaskAttackConfig:
    """``{attack name: its config}`` for every registered attack, beside the settings the attacks share.

    In a config file or an override an attack's section is ``attacks.<name>``: ``attacks.probe.layers=[0]``;
    ``attacks.<name>=true`` / ``false`` turns it on or off (``enabled`` in its section does the same), and an
    attack left unsaid keeps its default (:func:`~obliviate.evidence.attack_table.on_by_default`: the
    relearning attacks, MIA, the probe and the format shift are on; the newer ones off). ``attacks.relearn``
    (the related-corpus attack's section) is also the relearning attacker's training settings, which
    ``relearn_disjoint`` and ``unrelated_finetune`` share (steps, batch size, reads, ...)."""

    max_eval: int = 200
    """At most this many forget questions are scored at each point of a recovery curve (and by each
    attack)."""
    seed: int = 0
    lr_grid: list[float] | None = None
    """Learning rates the relearning attacker tries (chosen, with the step, on a selection split:
    :mod:`obliviate.attacks.relearn_disjoint`); default by model size, see
    :func:`~obliviate.attacks.relearn.attack_grid`. They replace ``relearn.lr``; the other ``relearn`` keys
    apply."""
    lora: bool = True
    """Also attack with LoRA adapters (at the grid's largest learning rate)."""
    select: list[str] | None = None
    """Run exactly these attacks, by name (:data:`~obliviate.attacks.attack.ATTACKS`), or ``["all"]``; it
    turns every attack on or off (``--attacks`` on the command line, ``attacks=`` in the Python API). None:
    each attack's own ``enabled``."""
    enabled: dict[str, bool] = field(default_factory=dict)
    """``{name: on}`` of every registered attack (filled from each one's default in the attack table)."""
    configs: dict[str, Any] = field(default_factory=dict)
    """``{name: config}`` of every registered attack that has settings (filled from each one's config
    class)."""

    def __post_init__(self):
        attacks = in_order()
        bad = [n for n in [*self.enabled, *self.configs] if n not in attacks]
        if bad:
            raise ATTACKS.unknown(bad[0])
        self.enabled = {n: bool(self.enabled.get(n, on_by_default(n))) for n in attacks}
        self.configs = {n: self.configs.get(n) or a.config() for n,
                        a in attacks.items() if a.config is not None}
        if self.select is not None:
            chosen = set(attack_names(self.select))
            self.enabled = {n: n in chosen for n in attacks}
        if self.max_eval < 1:
            raise ConfigError(f"config key 'max_eval': must be >= 1, got {self.max_eval}")
        check_grid(self.lr_grid, "lr_grid")

    def __getattr__(self, name: str):
        """``cfg.<attack>``: that attack's config."""
        configs = self.__dict__.get("configs")
        if configs is not None and name in configs:
            return configs[name]
        raise AttributeError(f"{type(self).__name__!r} has no attribute or attack config {name!r}")

    def on(self, name: str) -> bool:
        """Whether attack ``name`` is on."""
        return self.enabled[name]

    @classmethod
    def from_config(cls, data: dict, prefix: str = "attacks") -> "TaskAttackConfig":
        """Build from a config section: the shared keys, and ``<name>: true | false | {enabled, <its keys>}``
        per attack (a partial section keeps the attack's defaults); ``enabled`` / ``configs``, as
        :func:`to_dict` writes them, are read too. An unknown key is one :class:`ConfigError` naming it and
        the known ones."""
        if not isinstance(data, dict):
            raise ConfigError(f"config section '{prefix}' must be a mapping, got {data!r}"[:300])
        attacks = in_order()
        shared = {f.name for f in dataclasses.fields(cls)} - {"enabled", "configs"}
        enabled = dict(data.get("enabled") or {})
        given = {k: to_dict(v) if dataclasses.is_dataclass(v) else v for k,
                 v in (data.get("configs") or {}).items()}
        for key, value in data.items():
            if key in shared or key in ("enabled", "configs"):
                continue
            if key not in attacks:
                known = sorted(shared | set(attacks))
                raise ConfigError(f"unknown config key '{prefix}.{key}' (known: {', '.join(known)})"[:2000])
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                value = to_dict(value)
            if isinstance(value, dict):
                value = dict(value)
                if "enabled" in value:
                    enabled[key] = value.pop("enabled")
                if value and attacks[key].config is None:
                    raise ConfigError(f"config key '{prefix}.{key}': attack {key!r} has no settings, got "
                                      f"{', '.join(map(str, value))}")
                if value:
                    given[key] = deep_merge(given.get(key) or {}, value)
            else:
                enabled[key] = value
        for key, value in enabled.items():
            if key not in attacks:
                raise ATTACKS.unknown(key)
            if not isinstance(value, bool):
                if str(value).lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ConfigError(f"config key '{prefix}.{key}': expected "
                                      f"true/false or a section, got {value!r}")
                enabled[key] = str(value).lower() in ("true", "1", "yes")
        configs = {}
        for key, value in given.items():
            if key not in attacks:
                raise ATTACKS.unknown(key)
            cls_ = attacks[key].config
            configs[key] = from_dict(cls_, deep_merge(to_dict(cls_()), value), prefix=f"{prefix}.{key}")
        rest = {k: v for k, v in data.items() if k in shared}
        return from_fields(cls, {**rest, "enabled": enabled, "configs": configs}, prefix)


def attack_names(names) -> list[str]:
    """``names`` (a list, or one comma-separated string; ``all`` for every attack) as registered attack names,
    in the harness's order; an unknown name is a one-line :class:`ConfigError` that names it and the valid
    ones."""
    if isinstance(names, str):
        names = [names]
    attacks = list(in_order())
    given = [n.strip() for x in names for n in str(x).split(",") if n.strip()]
    if not given:
        raise ConfigError(f"--attacks: no attack named (valid: all, {', '.join(attacks)})")
    bad = [n for n in given if n != "all" and n not in attacks]
    if bad:
        raise ConfigError(f"unknown attack {bad[0]!r} (valid: all, {', '.join(attacks)})")
    return attacks if "all" in given else [n for n in attacks if n in given]


def enabled_attacks(task: Task, cfg: TaskAttackConfig) -> dict[str, Attack]:
    """The attacks of ``cfg`` that are on and have their data on ``task``, in the harness's order."""
    return {n: a for n, a in in_order().items() if cfg.on(n) and a.applies(task)}


def skipped_attacks(task: Task, cfg: TaskAttackConfig) -> dict[str, str]:
    """``{name: why}`` of the attacks of ``cfg`` that are on but lack their data on ``task`` (known from the
    inputs, before any model): ``needs <what>`` (:attr:`~obliviate.attacks.attack.Attack.needs`)."""
    return {n: f"needs {a.needs}, which task {task.name!r} lacks" for n, a in in_order().items()
            if cfg.on(n) and not a.applies(task)}


def not_run_line(kind: str, name: str, why: str) -> str:
    """The one line that says an attack or a method that was asked for does not run, and why."""
    return f"{kind} {name!r} not run: {why}"


def announce_skipped(task: Task, cfg: TaskAttackConfig) -> dict[str, str]:
    """:func:`skipped_attacks`, each said in one line (:func:`not_run_line`) to this module's logger (which
    the command line shows on stderr) before any model is loaded; returns them for results.json
    (``attacks_skipped``)."""
    skipped = skipped_attacks(task, cfg)
    if is_main_process():
        for name, why in skipped.items():
            log.info(not_run_line("attack", name, why))
    return skipped


KNOWS_MARGIN = 0.1
"""A base model whose forget score is within this of chance does not know the forget set."""


def check_attackable(task: Task, cfg: TaskAttackConfig) -> None:
    """A one-line :class:`DataError` when no enabled attack has the data it needs on ``task`` (checked before
    any model is built or trained)."""
    if not enabled_attacks(task, cfg):
        raise DataError(f"task {task.name!r} has no data for any attack: it needs a relearning corpus, "
                        "forget QA pairs (for the disjoint-halves attack), a holdout (membership inference) "
                        "or forget MCQs (for the probe)")


def run_task_attacks(model, tokenizer, task: Task, cfg: TaskAttackConfig | None = None, *, base_model=None,
                     base_score: float | None = None, metrics: dict | None = None,
                     out_dir: str | Path | None = None,
                     resume: bool = True, base_cache: dict | None = None, timings: dict | None = None,
                     costs: dict | None = None) -> dict:
    """Every registered attack (:data:`~obliviate.attacks.attack.ATTACKS`) that is on and has its data, in
    order; flat metrics (``model`` is never modified). Each attack's metrics start with its name
    (docs/evaluation.md lists them); beside them ``attack_score_chance``, ``base_knows_forget``,
    ``attacks_run`` and ``attack_cost``: ``{attack: {forwards, backwards, tokens}}`` of ``model`` and every
    copy an attack made of it (:func:`~obliviate.attacks.cost.counting`; the base model's scoring is not the
    attack's).

    ``metrics``: the model's own evaluation (:func:`~obliviate.eval.suite.evaluate_task`), which the format
    shift reads instead of scoring the variant sets again. ``base_model`` (or ``base_score``, its forget
    score) sets the target of ``*_steps_to_base``. ``timings``: a dict that receives each attack's wall
    seconds (kept out of the metrics: the same seed gives the same metrics); ``costs``: one that receives each
    attack's :func:`~obliviate.runs.cost.stage_record` (passes, tokens, wall seconds). ``base_cache``: a dict
    shared by the calls on one base model (a comparison's), so that its scores are computed once.
    """
    cfg = cfg or TaskAttackConfig()
    attacks = enabled_attacks(task, cfg)
    for name, attack in attacks.items():  # a bad setting fails now, not after the relearning attacks
        if attack.check is not None:
            attack.check(model, cfg.configs.get(name))
    out: dict = {"attacks_run": [], "attack_score_chance": forget_chance(task), "attack_cost": {}}
    fn = forget_score_fn(tokenizer, task, cfg.max_eval)
    cache = {} if base_cache is None else base_cache
    if base_model is not None and fn is not None:
        key = (id(base_model), "forget", cfg.max_eval)
        if key not in cache:
            cache[key] = fn(base_model)
        base_score = cache[key]
    if base_score is not None:
        out["base_knows_forget"] = bool(base_score > KNOWS_MARGIN + forget_chance(task))
        if not out["base_knows_forget"] and is_main_process():
            log.warning("the base model does not know the forget set (forget score %.3f): there is nothing "
                        "to recover, so steps_to_base is null", base_score)
        if not out["base_knows_forget"]:
            base_model, base_score = None, None
    run = AttackRun(model, tokenizer, task, cfg, fn, base_model, base_score, metrics,
                    None if out_dir is None else Path(out_dir), resume, cache)
    for name, attack in attacks.items():
        t = time.time()
        with counting(model) as cost, count_passes(model) as passes:
            res = attack.run(run, cfg.configs.get(name))
        if res:
            out.update(res)
            out["attacks_run"].append(name)
            out["attack_cost"][name] = cost.as_dict()
            if timings is not None:
                timings[name] = time.time() - t
            if costs is not None:
                costs[name] = stage_record(passes, time.time() - t)
        # its data is there, but nothing it reads could be scored on this model (no forget score to track)
        else:
            out.setdefault("attacks_skipped", {})[name] = "it had nothing to score on this model and task"
            if is_main_process():
                log.info(not_run_line("attack", name, out["attacks_skipped"][name]))
    if not out["attacks_run"]:
        raise DataError(f"task {task.name!r} has no data for any attack: it needs a relearning corpus, "
                        "forget QA pairs (for the disjoint-halves attack) or forget MCQs (for the probe)")
    return out

