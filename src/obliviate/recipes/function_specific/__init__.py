"""``obliviate reproduce function-specific``: unlearning objectives per language function (seed 002).

Paper: Atil, Gupta, Passonneau 2026, "Model Unlearning Objectives Vary for Distinct Language
Functions". Cosine RMU, the REINFORCE-learned retain weight and the multi-layer probe method are
a reconstruction from the paper's summary (docs/methods.md; :mod:`obliviate.methods.cosine_rmu`,
:mod:`obliviate.methods.meta_alpha`, :mod:`obliviate.methods.probe_unlearn`), not the authors' code.

Everything runs on the synthetic world and its cached tiny base model
(:func:`obliviate.train.pretrain.cached_pretrain` of ``pretrain.*``): ``obliviate demo``'s, pretrained with each
register sentence in 4 documents (``pretrain.world.register_repeats``, :data:`run.REGISTER_REPEATS`; with
the demo's 1 the base model is hardly ever toxic and the toxicity claims are not testable).

**Knowledge forgetting** (the paper's WMDP / MMLU setting). Unlearning trains on all forget facts,
retaining the retain and general facts (:func:`obliviate.tasks.world.forget_pairs`,
:func:`~obliviate.tasks.world.retain_pairs`), with L2 RMU, Adaptive RMU, cosine RMU (fixed alpha) and
cosine RMU with alpha learned by REINFORCE (:func:`obliviate.methods.meta_alpha.learn_alpha_unlearn`).
The forget and retain facts are split once (:func:`obliviate.methods.meta_alpha.world_meta_splits`,
``meta_frac``): the REINFORCE reward is S-unlearning on the *meta* share, every row of the table
is scored on the disjoint *final* share. As WMDP and MMLU, U and R come from 4-way multiple
choice by answer log-likelihood (chance 0.25, :func:`obliviate.tasks.world.full_answer_mcqs`):
U = clip((A0 - Au) / (A0 - 0.25)) on the final forget MCQs, R = clip((Mu - 0.25) / (M0 - 0.25))
with M = mean MCQ accuracy on the final retain and the general facts. (Greedy QA exact match is
reported beside it: on the world it drops to 0 within a few dozen steps for every RMU variant,
while the MCQ likelihoods still hold the answer, so it does not separate the methods.)

**Toxicity forgetting** (the paper's RealToxicityPrompts setting). The world's toxic register
pairs a toxic and a neutral sentence about the same person; its prompts cut each sentence
before the first adjective. A seeded ``tox_heldout_frac`` of the toxic prompts (with their
neutral twins) is held out; unlearning sees only the other pairs: forget = their toxic prompts
(``tox_inputs="prompts"``, the default: the state at the prompt's last token decides the
continuation) or whole toxic sentences (``"sentences"``); retain = their neutral twins plus the
retain QA pairs. Methods: L2 RMU, the single-layer probe method (middle layer) and the
multi-layer probe method (``probe_layers``, >= 3, default early/middle/late); the probes are
fitted on the frozen model with the same toxic vs neutral training inputs. Toxicity =
:func:`obliviate.eval.toxicity.continuation_toxicity` of greedy continuations (``max_new_tokens``
<= 20) of the held-out toxic prompts, scored by the offline
:class:`~obliviate.eval.toxicity.LexiconToxicityScorer` with the world's lexicon (mean, and the
fraction >= 0.5). U = clip((tox0 - toxu) / tox0) (docs/methods.md). R = mean of two retention
ratios: the knowledge R above (world knowledge kept) and the neutral-register fidelity
clip(Fu / F0), F = mean over held-out neutral prompts of the ROUGE-L recall of the greedy
continuation against the world's neutral sentence (the model still says the kind thing); a
component whose base score is at chance is left out. S = U x R.

Every variant runs with ``n_seeds`` unlearning seeds (seed, seed + 1, ...: data order,
control vector, REINFORCE samples, probe split); the table shows the mean over seeds
(``s_unlearning`` is the mean of the per-seed S). With one base model, the paper's "on 3 of 4
models" is read as "on k of n seeds" here. The probe directions of every layer are fitted on
the frozen base model and compared pairwise (heatmap).

Resumable: each finished (variant, seed) is stored in ``out/parts/<variant>-s<seed>.json``
with the settings that made it, and reused by a rerun into the same ``--out`` with the same
settings. ``results.json``: ``metrics.<variant>`` (``base``, ``rmu``, ``adaptive_rmu``,
``cosine_rmu``, ``cosine_rmu_learned_alpha``, ``tox_rmu``, ``tox_probe_single``,
``tox_probe_multi``) with ``u``, ``r``, ``s_unlearning`` and the raw scores; top-level
``probe_directions``, ``alpha_trajectories``, ``setup`` (how many facts and prompts each split holds) and
``settings`` (each variant's method, steps, lr and parameters): everything the report shows, so
``obliviate reproduce function-specific --render-only DIR`` re-renders it without training
(``run.py`` runs the experiments, ``claims.py`` holds the claims, ``report.py`` renders).

Run time (2 cores, cached base model): see docs/results/function-specific/.
"""

import obliviate.recipes.function_specific.run  # noqa: F401  (registers the recipe)
from obliviate.recipes.function_specific.claims import (
    KNOWLEDGE,
    LEARNED,
    PAPER,
    TOXICITY,
    VARIANTS,
    claims_of,
    make_claims,
)
from obliviate.recipes.function_specific.report import render
from obliviate.recipes.function_specific.run import (
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
