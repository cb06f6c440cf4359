"""``obliviate reproduce atwu``: learned token-level importance for unlearning (seed 001).

Paper: Yuce, Nikolaou, Flammarion 2026, "Learning What to Forget: Improving LLM Unlearning
via Learned Token-Level Importance". ATWU and its weighted objectives are a reconstruction
from the paper's summary (docs/methods.md, :mod:`obliviate.methods.atwu`), not the authors' code.

Two parts, each method's result stored when it finishes (``out/parts/<part>/<method>.json``),
so an interrupted run resumes into the same ``--out``:

1. **world**: the cached tiny base model of :class:`~obliviate.train.pretrain.PretrainConfig`
   (as :mod:`obliviate.recipes.compare.run` uses it) is unlearned on the forget facts with each method
   (defaults: each method's tiny preset, ``obliviate.methods.method_defaults``; overrides ``runs.<method>.*``).
   F = forget QA accuracy, R = mean of retain and general QA accuracy (the utility of
   S-unlearning); FQ, RD, UQ (:mod:`obliviate.eval.uq`) and S-unlearning. For the ATWU
   methods, the token AUROC of the learned scores (the final scorer, ``method.token_scores``;
   see below for which hidden states it reads) against the world's forget-specific answer tokens
   (:mod:`obliviate.eval.token_scores`); baselines uniform, probability (1 - p under the
   base model) and rarity (inverse frequency in the world's corpus).
2. **tofu**: the tiny-model TOFU protocol (:mod:`obliviate.recipes.tofu`, config ``tofu.*``, default
   :class:`~obliviate.recipes.tofu.TofuConfig`, so the base and retain-only models that ``obliviate
   tofu`` trained and cached are reused); each method unlearns ``forget10`` (overrides
   ``tofu_runs.<method>.*``); TOFU forget quality and model utility; F and R for
   FQ/RD/UQ are forget10 and retain ROUGE-L recall (``tofu_uq_from=prob``: TOFU probability).
   Without the TOFU files the part is skipped and the report says so.

``results.json``: ``metrics.<method>`` with ``uq``, ``fq``, ``rd``, ``s_unlearning`` and the
world QA accuracies; ``token_auroc`` for the ATWU methods; ``tofu_uq``, ``tofu_fq``, ``tofu_rd``,
``tofu_forget_quality``, ``tofu_model_utility``, ``tofu_forget10_rouge_l``, ``tofu_retain_rouge_l``
when the TOFU part ran. ``metrics.base`` (world and ``tofu_*`` of the fine-tuned TOFU model),
``metrics.tofu_retain_model``, ``metrics.token_baselines.<uniform|probability|rarity>.token_auroc``
and ``metrics.token_labels`` (how many specific / structural answer tokens).

Token AUROC and the one tuned setting. ATWU's scorer reads final-layer hidden states of the model
being unlearned, which unlearning itself scrambles on the forget answers (after 50 steps even the
probability heuristic computed on the unlearned model falls to AUROC ~0.2). ``token_auroc`` therefore
reads the learned scorer (final w, b) out on the *original* model's hidden states (the model the labels
and the probability baseline refer to; ``token_auroc_on=unlearned`` switches), and both readings are
reported (``token_auroc_base``, ``token_auroc_unlearned``). With docs/methods.md's defaults (w lr 1e-3,
one w-step, rho 0.3, tau 0.05, mu 10, beta 5, ``position="predict"``) the learned scores were not
reliably aligned with the true spans: world seed 0, run seeds 0/1/2, ATWU: 0.72/0.43/0.47 (unlearned
reading), 0.89/0.38/0.67 (original reading); world seed 1: 0.53/0.51/0.28 and 0.46/0.44/0.50. Neither
w_lr 3e-3 or 1e-2 (with 1 or 5 w-steps), tau 0 or 0.01, beta 1, exponent ``beta_z`` nor theta lr 3e-4
for 100 steps changed that on world seed 0 (all 0.36-0.72). The scorer reading the target token's *own*
hidden state (``position="token"``, :data:`SCORER_DEFAULTS`) did: world seed 0, run seeds 0-3: original
reading 0.76/0.97/0.91/0.91, unlearned 0.78/0.65/0.48/0.71; checked on world seed 1, run seeds 0-2:
0.92/0.92/0.86 and 0.79/0.72/0.39 (its own position carries the token's identity, e.g. an invented
name, while the predicting position carries the model's guess). The recipe uses it for every ATWU
method. With it, on world seed 0 (run seeds 0/1), ATWU-SimNPO's scores align too (original reading
0.65/0.92, unlearned 0.71/0.82) but ATWU-NPO's do not (at the recipe's lr 3e-4: original 0.36/0.28,
unlearned 0.47/0.77; lr 1e-3, run seed 0: 0.30 and 0.51): its scorer's w-step is SATGA+'s while theta
follows NPO.
On the world the heuristics are near-perfect (probability 0.998, rarity 1.0 on world seed 0): the
forget-specific tokens are invented names and values, rare in the corpus by construction.

Run time (2 cores, cached world and TOFU base models): see docs/recipes.md, section "atwu".
"""

import obliviate.recipes.atwu.run  # noqa: F401  (registers the recipe; its ``run`` is ``obliviate.recipes.atwu.run.run``)
from obliviate.recipes.atwu.claims import make_claims
from obliviate.recipes.atwu.report import render
from obliviate.recipes.atwu.run import AtwuRecipeConfig, run_world

__all__ = ["AtwuRecipeConfig", "make_claims", "render", "run_world"]
