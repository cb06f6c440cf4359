"""``obliviate reproduce token-filtering``: token-level pretraining data filtering (seed 004).

Rathi and Radford 2026: weak SAE labels, biLM token and document classifiers, filtered pretraining at
several sizes, Pareto, label noise, adversarial fine-tuning and refusal training on the world (forget =
medicine, retain = biology). ``run.py`` runs the experiments (``--quick`` differs only in the fields
that default to ``None``: :data:`SCALES`), ``claims.py`` holds the claims, ``report.py`` renders.
Parts, settings, ``results.json`` and run times: docs/recipes.md#token-filtering.
"""

import obliviate.papers.token_filtering.run  # noqa: F401  (registers the recipe; its ``run`` is ``run.run``)
from obliviate.papers.token_filtering.claims import claims_of, make_claims
from obliviate.papers.token_filtering.report import render
from obliviate.papers.token_filtering.run import SCALES, TokenFilteringConfig, resolve

__all__ = ["SCALES", "TokenFilteringConfig", "claims_of", "make_claims", "render", "resolve"]
