"""Weak token labels from a labeller model, end to end: a TopK SAE on its residual stream, domain
latents chosen on a labelled calibration slice, then the ">= k latents above threshold, then window
expansion" rule over the whole dataset (docs/methods.md, seed 004).

The calibration slice is the first ``calibration_fraction`` of the documents: only their ground-truth
labels are read, to choose the latents (the domain-ratio statistic); every other document is labelled
from the SAE alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from obliviate.data import TokenDataset
from obliviate.errors import DataError
from obliviate.filtering.sae import residual_activations, train_sae
from obliviate.filtering.weak_labels import (
    flatten,
    label_dataset,
    latent_thresholds,
    prf1,
    select_domain_latents,
)


@dataclass
class WeakLabelConfig:
    latents: int = 512
    """SAE width."""
    k: int = 32
    """Active latents per token (TopK)."""
    steps: int = 600
    """SAE training steps."""
    calibration_fraction: float = 0.1
    """Share of the documents whose ground truth chooses the domain latents."""
    min_ratio: float = 2.0
    """Domain-ratio cut for a domain latent (:func:`~obliviate.filtering.select_domain_latents`)."""
    min_latents: int = 2
    """A token is seeded when this many domain latents exceed their thresholds."""
    seed: int = 0


def sae_weak_labels(labeller, dataset: TokenDataset, truth: Sequence[np.ndarray], layer: int,
                    cfg: WeakLabelConfig,
                    *, special_ids: Sequence[int] = (), pad_id: int = 0,
                    progress: bool = False) -> tuple[list[np.ndarray], dict]:
    """Per-sequence weak labels of ``dataset`` from ``labeller``'s layer ``layer``, and what made them.

    ``truth`` (per-sequence bool arrays) is read on the calibration slice only, and to score the labels.
    When no latent passes ``min_ratio`` (a weak labeller), the up to 8 most domain-specific latents that
    fire at all are used. Returns ``(weak, info)``; ``info`` holds ``sae`` (its training record, the number
    and ids of the domain latents) and ``weak_labels`` (precision, recall, F1 against ``truth``).
    """
    acts, _ = residual_activations(labeller, dataset, layer, pad_id=pad_id)
    sae, sae_info = train_sae(acts, cfg.latents, cfg.k, steps=cfg.steps, seed=cfg.seed, progress=progress)
    codes = sae.encode_all(acts)
    n_cal = max(1, int(round(cfg.calibration_fraction * len(dataset))))
    cal_rows = sum(len(s) for s in dataset.input_ids[:n_cal])
    cal_truth = flatten(truth[:n_cal])
    latents = select_domain_latents(codes[:cal_rows], cal_truth, min_ratio=cfg.min_ratio)
    if not latents:  # a weak labeller: fall back to the most domain-specific latents that fire at all
        latents = select_domain_latents(codes[:cal_rows], cal_truth, min_ratio=1.0, min_domain_freq=0.0,
                                        max_latents=8)
    if not latents:
        raise DataError("no SAE latent is more active on the forget domain than elsewhere: the labeller is "
                        "too weak (raise labeller_steps or sae_steps)")
    thresholds = latent_thresholds(codes[:, latents])
    weak = label_dataset(labeller, dataset, sae, layer, latents, thresholds, special_ids=special_ids,
                         min_latents=min(cfg.min_latents, len(latents)), pad_id=pad_id)
    if not any(w.any() for w in weak):
        raise DataError("the weak labels flag no token (lower min_latents or min_ratio)")
    m = prf1(weak, truth)
    info = {"sae": {"layer": layer, **sae_info, "n_domain_latents": len(latents), "domain_latents": latents},
            "weak_labels": {k: m[k] for k in ("precision", "recall", "f1")}}
    return weak, info
