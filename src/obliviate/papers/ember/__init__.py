"""``obliviate reproduce ember``: embedding erasure against relearning (seeds 000 and 003).

Suslik, Shafran, Geva 2026, "Don't Forget Your Embeddings": EMBER alone and under RMU, SNMF and CRISP
on the world's concept (part ``world``) and on the real EMBER concepts (part ``data``). ``run.py``
runs the experiments, ``claims.py`` holds the claims, ``report.py`` renders. Rows, metrics, settings,
``results.json`` and run time: docs/recipes.md#ember.
"""

import obliviate.papers.ember.run  # noqa: F401  (registers the recipe)
from obliviate.papers.ember.claims import PAPER, claims_of, make_claims
from obliviate.papers.ember.report import render
from obliviate.papers.ember.run import EmberRecipeConfig, apply_quick, footprint, term_spans

__all__ = ["PAPER", "EmberRecipeConfig", "apply_quick", "claims_of", "footprint", "make_claims", "render",
           "term_spans"]
