"""``obliviate reproduce atwu``: learned token-level importance for unlearning (seed 001).

Yuce, Nikolaou, Flammarion 2026: ATWU and its weighted objectives (a reconstruction from the paper's
summary, docs/methods.md, :mod:`obliviate.methods.atwu`) against the baselines on the world and the
tiny-model TOFU protocol, with the token AUROC of the learned scores. ``run.py`` runs the experiments,
``claims.py`` holds the claims, ``report.py`` renders. Parts, metrics, the tuned scorer setting,
``results.json`` and run time: docs/recipes.md#atwu.
"""

# registers the recipe; its ``run`` is ``obliviate.papers.atwu.run.run``
import obliviate.papers.atwu.run  # noqa: F401
from obliviate.papers.atwu.claims import make_claims
from obliviate.papers.atwu.report import render
from obliviate.papers.atwu.run import AtwuRecipeConfig, run_world

__all__ = ["AtwuRecipeConfig", "make_claims", "render", "run_world"]
