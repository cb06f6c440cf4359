"""Token-level pretraining data filtering (seed 004, Rathi and Radford 2026; docs/methods.md).

* :mod:`.sae` — TopK sparse autoencoder on a labeller model's residual stream; SAEs from SAELens, sparsify, Gemma
  Scope (:func:`load_sae`).
* :mod:`.weak_labels` — domain latents, per-latent thresholds, the ">= 2 latents, then
  window expansion" rule, precision/recall/F1 against ground truth.
* :mod:`.labelling` — the two above end to end: :func:`sae_weak_labels` of a labeller model.
* :mod:`.refusal` — refusal training and refusal rates (the paper's refusal experiment).
* :mod:`.classifiers` — biLM token classifier (optionally with context pooling), document
  classifier, optional pretrained encoder features, threshold sweeps (AUROC), throughput.
* :mod:`.token_classifier` — the classifiers fit end to end on weak labels and scored on held-out
  documents: :func:`fit_token_classifiers`.
* :mod:`.strategies` — loss masking (input/target convention), removal with
  ``<|hidden|>``, document drop, label noise; batches for the one training loop.
* :mod:`.scaling` — the filtered models' sizes (:data:`FILTERED_MODELS`), 6ND compute, power-law fit,
  compute slowdown, adversarial tokens.
"""

from obliviate.filtering.classifiers import (
    BiLM,
    ContextPooled,
    DocumentClassifier,
    LogisticHead,
    MiniLMFeaturizer,
    TokenClassifier,
    minilm_dir,
    reverse_padded,
    threshold_sweep,
    throughput,
    train_lm,
    training_throughput,
    window_mean,
)
from obliviate.filtering.labelling import WeakLabelConfig, sae_weak_labels
from obliviate.filtering.sae import PretrainedSAE, TopKSAE, load_sae, residual_activations, train_sae
from obliviate.filtering.scaling import (
    FILTERED_MODELS,
    FilteredModels,
    compute_slowdown,
    equivalent_compute,
    fit_power_law,
    geometric_sizes,
    tokens_for,
    tokens_to_recover,
    training_flops,
)
from obliviate.filtering.strategies import (
    CONVENTIONS,
    STRATEGIES,
    FilteredDataset,
    add_label_noise,
    apply_strategy,
    collate_weighted,
    document_flags,
    flags_from_probs,
    loss_weights,
    make_batch_fn,
    pack_filtered,
)
from obliviate.filtering.token_classifier import TokenClassifierConfig, TokenClassifiers, fit_token_classifiers
from obliviate.filtering.weak_labels import (
    domain_ratio,
    domain_runs,
    flatten,
    ground_truth,
    label_dataset,
    latent_thresholds,
    prf1,
    select_domain_latents,
    special_mask,
    split_flat,
    top_activating_tokens,
    weak_labels,
    window_expand,
)

__all__ = [
    "WeakLabelConfig", "sae_weak_labels",
    "BiLM", "ContextPooled", "DocumentClassifier", "LogisticHead", "MiniLMFeaturizer", "TokenClassifier", "minilm_dir",
    "reverse_padded", "threshold_sweep", "throughput", "train_lm", "training_throughput", "window_mean",
    "PretrainedSAE", "TopKSAE", "load_sae", "residual_activations", "train_sae",
    "FILTERED_MODELS", "FilteredModels", "compute_slowdown", "equivalent_compute", "fit_power_law", "geometric_sizes",
    "tokens_for", "tokens_to_recover", "training_flops",
    "TokenClassifierConfig", "TokenClassifiers", "fit_token_classifiers",
    "CONVENTIONS", "STRATEGIES", "FilteredDataset", "add_label_noise", "apply_strategy", "collate_weighted",
    "document_flags", "flags_from_probs", "loss_weights", "make_batch_fn", "pack_filtered",
    "domain_ratio", "domain_runs", "flatten", "ground_truth", "label_dataset", "latent_thresholds", "prf1",
    "select_domain_latents", "special_mask", "split_flat", "top_activating_tokens", "weak_labels",
    "window_expand",
]
