"""Token-level pretraining data filtering (Rathi and Radford 2026; docs/methods.md, docs/recipes.md).

:mod:`.sae` (TopK SAEs, :func:`load_sae`), :mod:`.weak_labels` and :mod:`.labelling` (SAE weak labels),
:mod:`.classifiers` and :mod:`.token_classifier` (token and document classifiers), :mod:`.strategies`
(masking, ``<|hidden|>`` removal, document drop, label noise), :mod:`.refusal` and :mod:`.scaling` (the
paper's experiments).
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
from obliviate.filtering.token_classifier import (TokenClassifierConfig, TokenClassifiers,
                                                  fit_token_classifiers)
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
    "BiLM", "ContextPooled", "DocumentClassifier", "LogisticHead", "MiniLMFeaturizer", "TokenClassifier",
    "minilm_dir",
    "reverse_padded", "threshold_sweep", "throughput", "train_lm", "training_throughput", "window_mean",
    "PretrainedSAE", "TopKSAE", "load_sae", "residual_activations", "train_sae",
    "FILTERED_MODELS", "FilteredModels", "compute_slowdown", "equivalent_compute", "fit_power_law",
    "geometric_sizes",
    "tokens_for", "tokens_to_recover", "training_flops",
    "TokenClassifierConfig", "TokenClassifiers", "fit_token_classifiers",
    "CONVENTIONS", "STRATEGIES", "FilteredDataset", "add_label_noise", "apply_strategy", "collate_weighted",
    "document_flags", "flags_from_probs", "loss_weights", "make_batch_fn", "pack_filtered",
    "domain_ratio", "domain_runs", "flatten", "ground_truth", "label_dataset", "latent_thresholds", "prf1",
    "select_domain_latents", "special_mask", "split_flat", "top_activating_tokens", "weak_labels",
    "window_expand",
]
