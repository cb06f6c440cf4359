"""``obliviate reproduce function-specific``: unlearning objectives per language function (seed 002).

Atil, Gupta, Passonneau 2026: knowledge forgetting (RMU variants, REINFORCE-learned alpha) and toxicity
forgetting (RMU, single- and multi-layer probe methods) on the world, a reconstruction from the paper's
summary (docs/methods.md). ``run.py`` runs the experiments, ``claims.py`` holds the claims,
``report.py`` renders. Definitions of U, R, S, ``results.json`` and run time:
docs/recipes.md#function-specific.
"""

import obliviate.papers.function_specific.run  # noqa: F401  (registers the recipe)
from obliviate.papers.function_specific.claims import (
    KNOWLEDGE,
    LEARNED,
    PAPER,
    TOXICITY,
    VARIANTS,
    claims_of,
    make_claims,
)
from obliviate.papers.function_specific.report import render
from obliviate.papers.function_specific.run import (
    FunctionSpecificConfig,
    knowledge_scores,
    register_pairs,
    resolve,
    toxicity_data,
    toxicity_scores,
)

__all__ = ["KNOWLEDGE", "LEARNED", "PAPER", "TOXICITY", "VARIANTS", "FunctionSpecificConfig", "claims_of",
           "knowledge_scores", "make_claims", "register_pairs", "render", "resolve", "toxicity_data",
           "toxicity_scores"]
