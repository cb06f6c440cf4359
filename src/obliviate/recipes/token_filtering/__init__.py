"""Token-level pretraining data filtering (seed 004, Rathi and Radford 2026): ``obliviate reproduce token-filtering``.

The claim: filtering the forget domain token by token *during pretraining* removes the
capability more robustly than post-hoc unlearning, Pareto-dominates document filtering and
gets stronger with scale (docs/methods.md). The forget domain is the world's medicine, the
retain domain its biology (worded like medicine on purpose). Every number is measured on
held-out documents of the world (``eval_fraction`` of them, never trained on).

Parts, each stored in ``out/parts/<name>.json`` when finished (models in ``out/models/``),
so a rerun into the same ``--out`` skips what is done:

1. The labeller: a larger tiny Llama pretrained on the whole world
   (:func:`obliviate.train.pretrain.cached_pretrain`, so trained once and shared with other runs).
2. ``labels``: a TopK SAE on its residual stream (layer ``n_layer // 2``); domain latents by
   the domain-ratio statistic on a labelled calibration slice (``calibration_fraction`` of
   the training documents; :func:`~obliviate.filtering.select_domain_latents`); the
   ">= ``min_latents`` latents above threshold, then window expansion" rule gives weak labels
   on the training documents (precision/recall/F1 against ground truth). A biLM
   (``bilm_layers`` x ``bilm_d``) is trained on the training documents; its token head (on the
   biLM state plus its mean over ``context_window`` tokens each side, our addition: see
   :class:`~obliviate.filtering.ContextPooled`) is fit on the weak labels, its document head
   (mean-pooled biLM states) on weak document labels (a document is in-domain
   when more than ``doc_label_fraction`` of its tokens are weakly flagged). Both are scored
   against ground truth on the held-out documents (threshold sweep, AUROC), next to heads
   fit on ground truth and on weak labels with flip noise (weak-label tolerance).
3. ``pretrain/<size>/<strategy>@<threshold>[+noise<p>]``: one pretraining run. Sizes are
   ``"<layers>x<width>"`` tiny Llamas trained on ``tokens_per_param * params`` tokens
   (params counted with the tied embedding; FLOPs ``6 N D``). Strategies: ``none``
   (unfiltered), ``mask`` (loss masking, ``convention``), ``remove`` (``<|hidden|>``
   substitution + masking), ``drop_document`` (document classifier); flags come from the
   token classifier at ``threshold`` (document classifier at ``doc_threshold``).
4. Analyses (no training): compute slowdown per size and strategy on the forget domain and
   the same measure on the retain domain (:mod:`obliviate.filtering.scaling`), with each run's
   ``epochs`` over the training corpus and the sizes where the unfiltered held-out loss rises
   (:func:`baseline_rises`: a corpus repeated for many epochs is memorised, no power law holds,
   and the scale claim is reported as not testable; a larger ``world`` gives a larger corpus); the Pareto
   front of forget vs retain loss across classifier thresholds at ``pareto_size``; label
   noise p on the pretraining flags at ``pareto_size``.
5. ``adversarial/<strategy>`` and ``adversarial/rmu``: at the largest size, fine-tune on
   forget-domain text (medicine runs of the training documents) with AdamW (betas 0.9/0.95,
   weight decay 0.01, clip 0.5, ``adv_lr``: the paper's 3e-5 is for 1.8B models, far too small
   here) and count tokens until the held-out forget loss is back at the unfiltered model's;
   ``rmu`` is RMU (its tiny preset, ``obliviate.methods.method_defaults``, and ``rmu`` overrides) applied
   to the unfiltered model with forget-domain text as forget set and the other domains' text
   as retain set.
6. ``refusal/<strategy>``: at the largest size, SFT on refusals for the forget facts'
   questions of one relation plus as many ordinary retain/general questions with their
   answers; refusal rate (greedy answer starts with "I cannot") on the forget questions of
   the other relations vs held-out retain and general questions.

``results.json`` holds the resolved config, the metrics (with each fine-tuning curve) and the timings:
everything the report shows, so ``obliviate reproduce token-filtering --render-only DIR`` re-renders it
without training (``run.py`` runs the experiments, ``claims.py`` holds the claims, ``report.py``
renders; the adversarial fine-tune is :mod:`obliviate.attacks.adversarial`, refusal training
:mod:`obliviate.filtering.refusal`, model sizes :func:`obliviate.models.builders.parse_size`).

``--quick`` and the full run differ only in the fields that default to ``None`` (sizes,
tokens per parameter, labeller, training steps, thresholds, noise levels): see
:data:`PRESETS`. Anything set explicitly wins.
"""

import obliviate.recipes.token_filtering.run  # noqa: F401  (registers the recipe; its ``run`` is ``run.run``)
from obliviate.recipes.token_filtering.claims import claims_of, make_claims
from obliviate.recipes.token_filtering.report import render
from obliviate.recipes.token_filtering.run import PRESETS, TokenFilteringConfig, resolve

__all__ = ["PRESETS", "TokenFilteringConfig", "claims_of", "make_claims", "render", "resolve"]
