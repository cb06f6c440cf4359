"""Each attack's defaults, in one table (:data:`ATTACK_TABLE`): where it runs unless the config says, its
place in the harness's order and the verdict's rank of each of its reads. An attack's file keeps what is its
own (name, config, ``applies``, ``needs``, its reads' keys and labels); an attack in no row runs only when
asked for, after the listed ones (docs/evaluation.md, "The attack table").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from obliviate.attacks.attack import ATTACKS, Attack

WHERE = ("default", "demo", "compare", "request")
"""Where an attack runs unless told, widest first: ``default`` in every run that attacks (``obliviate
attack``, ``compare``, ``demo``), ``demo`` in ``demo`` and ``compare``, ``compare`` in ``compare`` only,
``request`` only when named (``--attacks NAME``, ``attacks.NAME=true``)."""
RUNS = {"attack": ("default",), "demo": ("default", "demo"), "compare": ("default", "demo", "compare")}
"""The rows each kind of run turns on unless told: ``attack`` is any run with the harness's defaults
(``obliviate attack``, a bare :class:`~obliviate.evidence.harness.TaskAttackConfig`), ``demo`` and
``compare`` the commands."""


@dataclass(frozen=True)
class Defaults:
    """One row of :data:`ATTACK_TABLE`."""

    runs: str = "request"
    """Where it runs unless told (:data:`WHERE`)."""
    ranks: dict[str, int] = field(default_factory=dict)
    """``{read name: rank}`` of each read it declares (:class:`~obliviate.attacks.attack.AttackRead`): the
    verdict reads the attacks strongest first, lower first (a tie of severity goes to the earlier)."""


ATTACK_TABLE: dict[str, Defaults] = {
    # attack, in the harness's order: where it runs, the verdict's rank of each of its reads (1: read first)
    "relearn": Defaults("default", {"relearn": 2}),
    "relearn_disjoint": Defaults("default", {"relearn_disjoint": 1}),
    # the retain set alone: a relearning budget per setting (compare's grid), too long for the demo; it trains on
    # no forget item, so a tie of severity goes to every other read
    "relearn_retain": Defaults("compare", {"relearn_retain": 16}),
    "mia": Defaults("default"),  # no before and after: read against the oracle alone
    "probe": Defaults("default"),  # the same
    "format_shift": Defaults("default", {"format_shift": 15}),
    "quantize": Defaults("demo", {"quantize": 4}),
    "ablate": Defaults("demo", {"ablate": 5, "ablate_whitebox": 6}),
    "logit_lens": Defaults("demo", {"logit_lens": 7}),
    "in_context": Defaults("demo", {"in_context": 8}),
    "prompts": Defaults("compare", {"prompts": 10}),
    "unrelated_finetune": Defaults("compare", {"unrelated_finetune": 3}),
    "gcg": Defaults("request", {"gcg": 13}),  # the optimised suffix: the costly one
    "leak_at_k": Defaults("compare", {"leak_at_k": 11}),
    "soft_prompt": Defaults("compare", {"soft_prompt": 12}),
    "prune": Defaults("compare", {"prune": 9}),
    "gcg_prefix": Defaults("request", {"gcg_prefix": 14}),  # GCG's cost
}
"""``{attack: its defaults}``; the rows' order is the harness's. docs/evaluation.md, "More attacks", gives
each attack's cost, which decides where it runs."""
UNLISTED = Defaults()
"""The defaults of an attack in no row: on request only."""


def defaults(name: str) -> Defaults:
    """Attack ``name``'s row, or :data:`UNLISTED`."""
    return ATTACK_TABLE.get(name, UNLISTED)


def on_by_default(name: str) -> bool:
    """Whether attack ``name`` runs when the config does not say (``attacks.<name>=true`` / ``false``)."""
    return defaults(name).runs == "default"


def enabled_in(run: str) -> list[str]:
    """The attacks on unless told in ``run`` (:data:`RUNS`: ``attack``, ``demo``, ``compare``), in the
    harness's order."""
    return [n for n, d in ATTACK_TABLE.items() if d.runs in RUNS[run]]


def in_order() -> dict[str, Attack]:
    """Every registered attack, in the order the harness runs them: the table's rows, then the others by
    name."""
    place = {n: i for i, n in enumerate(ATTACK_TABLE)}
    return dict(sorted(ATTACKS.items(), key=lambda kv: (place.get(kv[0], len(place)), kv[0])))


def read_rank(read: str) -> float:
    """The verdict's rank of read ``read`` (lower is read first); a read in no row ranks after every listed
    one."""
    return next((d.ranks[read] for d in ATTACK_TABLE.values() if read in d.ranks), math.inf)
