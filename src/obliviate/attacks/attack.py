"""What an attack is: one file registered by :func:`register_attack` (docs/evaluation.md, "Adding an attack").

An attack declares its name (the config key ``attacks.<name>`` and the prefix of its metrics), its config
dataclass, ``applies(task)``, ``run(r, cfg) -> dict`` of flat metrics and how the verdict reads it for
calibration (:class:`AttackRead`: its before and after, on its own scale). :data:`ATTACKS` imports every
module of :mod:`obliviate.attacks` on its first look-up, as the methods' registry does, so adding an attack is
adding a file. Where it runs unless told, its place in the harness's order and its reads' rank in the verdict
are no attack's own: one table holds them for every attack (:mod:`obliviate.evidence.attack_table`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from obliviate.registry import Registry
from obliviate.tasks.base import Task


@dataclass(frozen=True)
class AttackRead:
    """Where the verdict reads one attack in a model's metrics: its forget score without the attack
    (``start``) and under it (``after``), on the attack's own scale; the base model's reference (``base``, a
    key of the base model's metrics; default ``start``) and the chance level (``chance``, a key of the base
    model's metrics).

    Beside them the attack records, for each read it declares, two integers (:func:`read_counts`):
    ``<name>_items``, how many items ``after`` is a mean over on that model (the binomial count of one
    item-level draw: a mean of k group means over n_i items each counts ``k^2 / sum(1 / n_i)``,
    :func:`~obliviate.eval.suite.effective_items`), and ``<name>_variants``, how many variant scores ``after``
    is the maximum of on those same items (1 when it is not a maximum; a choice made on a separate selection
    split and read on held-out items is not one). The verdict's band reads that read's own item count and
    corrects a maximum over its variants (Bonferroni); an attack that read nothing records neither."""

    start: str
    after: str
    base: str | None = None
    chance: str = "attack_score_chance"
    decides: bool = True
    """False: calibrated and shown, but no verdict rests on it (a white-box attack that needs the base
    model)."""
    label: str = ""
    shown: tuple[str, ...] = ()
    """Further reads of the attack shown beside it under their own names (the logit lens's frame-forced
    read)."""
    name: str | None = None
    """The read's name in the calibration (``<name>_calibrated``, ...); default the attack's name."""
    flag: Callable[[dict], str | None] | None = None
    """``flag(metrics)``: a one-line warning where this read is inflated on a model (the disjoint attack's
    answer leakage), else None; a verdict this read decides names it
    (:func:`obliviate.evidence.verdict.verdict_line`)."""


@dataclass
class AttackRun:
    """What every attack of one :func:`~obliviate.evidence.harness.run_task_attacks` call reads; ``cfg`` is
    the whole :class:`~obliviate.evidence.harness.TaskAttackConfig` (its shared settings: ``max_eval``,
    ``seed``, the relearning grid), the attack's own config is ``run``'s second argument."""

    model: object
    tokenizer: object
    task: Task
    cfg: Any
    score_fn: Callable | None
    """The forget score the relearning attacks track (:func:`~obliviate.attacks.scoring.forget_score_fn`)."""
    base_model: object = None
    base_score: float | None = None
    metrics: dict | None = None
    run_dir: Path | None = None
    resume: bool = True
    base_cache: dict = field(default_factory=dict)
    """The base model's scores, each computed once (:meth:`on_base`)."""

    def on_base(self, key: tuple, fn: Callable):
        """``fn(base_model)``, computed once per base model and ``key`` and kept in :attr:`base_cache` (a
        comparison passes one cache for all the models it attacks, so the base model is scored once)."""
        key = (id(self.base_model), *key)
        if key not in self.base_cache:
            self.base_cache[key] = fn(self.base_model)
        return self.base_cache[key]


@dataclass(frozen=True)
class Attack:
    name: str
    run: Callable[[AttackRun, Any], dict]
    """``run(r, cfg)``: flat metrics, each starting with ``name`` (empty: the attack had nothing to read)."""
    applies: Callable[[Task], bool]
    """Whether a task has the data the attack needs."""
    config: type | None = None
    """The attack's config dataclass (``attacks.<name>.<key>``); None: it has no settings."""
    reads: tuple[AttackRead, ...] = ()
    """How the verdict reads it; none: not calibrated (read against the negative control alone, or not at
    all)."""
    check: Callable[[Any, Any], None] | None = None
    """``check(model, cfg)``: a bad setting fails before any attack runs (a probe layer the model lacks)."""
    needs: str = ""
    """The data ``applies`` looks for, in words a user can act on (``a holdout set: --holdout FILE ...``):
    the line that says why an attack that is on did not run
    (:func:`obliviate.evidence.harness.skipped_attacks`)."""


ATTACKS = Registry("attack", package="obliviate.attacks")
"""``name -> Attack``, found by importing every module of :mod:`obliviate.attacks`;
:func:`obliviate.evidence.attack_table.in_order` gives them in the harness's order."""


def register_attack(name: str, *, applies: Callable[[Task], bool], needs: str, config: type | None = None,
                    reads: tuple[AttackRead, ...] | AttackRead = (),
                    check: Callable[[Any, Any], None] | None = None):
    """Decorator: ``run(r: AttackRun, cfg) -> dict`` of flat metrics becomes attack ``name`` (module
    docstring); ``needs`` says in words what ``applies`` looks for (:attr:`Attack.needs`)."""
    if not needs.strip():
        raise ValueError(f"attack {name!r}: say what data it needs "
                         "(needs=...), which a user reads when it is skipped")
    reads = (reads,) if isinstance(reads, AttackRead) else tuple(reads)
    reads = tuple(r if r.name else AttackRead(**{**r.__dict__, "name": name}) for r in reads)
    return ATTACKS.register(name, wrap=lambda fn: Attack(name, fn, applies, config, reads, check, needs))


def read_counts(name: str, items: int, variants: int = 1) -> dict[str, int]:
    """``{"<name>_items": items, "<name>_variants": variants}``, the counts every read of an attack records
    beside its scores (:class:`AttackRead`): how many items its after-score is a mean over on this model, and
    how many variant scores it is the maximum of (1: not a maximum). A one-line :class:`ValueError` for a
    negative item count or fewer than one variant."""
    n, v = int(items), int(variants)
    if n != items or v != variants or n < 0 or v < 1:
        raise ValueError(f"read {name!r}: items must be a whole number >= 0 and variants one >= 1, got "
                         f"{items!r} and {variants!r}")
    return {f"{name}_items": n, f"{name}_variants": v}
