"""The token classifier of data filtering, fit end to end on weak labels (docs/methods.md, seed 004): a biLM
trained on the corpus, its token features (with the context window mean), a logistic head fit on the weak
labels and, to compare, on the ground truth, threshold sweeps on held-out documents, the AUROC under label
noise, and the document-classifier baseline on mean-pooled features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from obliviate.data import TokenDataset
from obliviate.filtering.classifiers import BiLM, LogisticHead, threshold_sweep, window_mean
from obliviate.filtering.strategies import add_label_noise, document_flags
from obliviate.models.builders import parse_size


@dataclass
class TokenClassifierConfig:
    layers: int = 1
    """biLM depth: one layer keeps the classifier >= 20x cheaper per token than pretraining the largest model
    the token-filtering recipe filters (``make bench``)."""
    d_model: int = 16
    """biLM width (heads of 16 dimensions, :func:`~obliviate.models.builders.parse_size`)."""
    steps: int = 400
    """Training steps of each biLM half."""
    context_window: int = 8
    """Token features = [biLM state, its mean over +-window tokens] (0: the biLM state alone, as in the
    paper)."""
    thresholds: list[float] = field(default_factory=lambda: [round(float(t),
                                                                   2) for t in np.linspace(0.1, 0.9, 9)])
    """Thresholds of the token classifiers' held-out sweeps."""
    noise_ps: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.2, 0.3])
    """Flip noise on the weak labels the token head is fit on (AUROC vs p)."""
    fit_tokens: int = 30000
    """The logistic heads are fit on a seeded sample of at most this many training tokens."""
    doc_label_fraction: float = 0.3
    """A document's weak (and true) label: more than this fraction of its tokens in-domain."""
    doc_threshold: float = 0.5
    """Document-classifier threshold of its held-out scores."""
    seed: int = 0


@dataclass
class TokenClassifiers:
    """What :func:`fit_token_classifiers` made."""

    probs: list[np.ndarray]
    """Per training sequence: the weak-label token head's probabilities (0 at special tokens)."""
    doc_probs: np.ndarray
    """Per training document: the weak-label document classifier's probability (the document's weak fraction
    when the weak document labels are all one class)."""
    metrics: dict
    """``token_classifier`` (``weak`` and ``ground_truth`` sweeps), ``classifier_noise`` (AUROC per p) and
    ``document_classifier`` (``weak`` and ``ground_truth``)."""


def fit_token_classifiers(train: TokenDataset, held: TokenDataset, weak: Sequence[np.ndarray],
                          truth_train: Sequence[np.ndarray], truth_held: Sequence[np.ndarray],
                          vocab_size: int,
                          cfg: TokenClassifierConfig, *, special_ids: Sequence[int], pad_id: int, bos_id: int,
                          eos_id: int, save_dir: str | Path | None = None,
                          progress: bool = False) -> TokenClassifiers:
    """Train the biLM on ``train``, fit the token heads (on ``weak``, and on ``truth_train`` to compare) and
    the document classifier, and score them on ``held`` against ``truth_held``.

    ``save_dir`` (if given) receives the biLM (``bilm/``) and the weak-label token head
    (``token_head.safetensors``). Special tokens are neither trained on nor scored.
    """
    bilm = BiLM.train(train, vocab_size, n_layer=cfg.layers, d_model=cfg.d_model,
                      n_head=parse_size(f"1x{cfg.d_model}")[2], steps=cfg.steps, seed=cfg.seed, pad_id=pad_id,
                      bos_id=bos_id, eos_id=eos_id, layer=cfg.layers - 1, progress=progress)
    if save_dir is not None:
        bilm.save(Path(save_dir) / "bilm")
    # no_grad inside
    base_tr, base_ev = bilm.features(train, batch_size=64), bilm.features(held, batch_size=64)

    def pooled(feats):
        return [torch.cat([h, window_mean(h, cfg.context_window)],
                          -1) for h in feats] if cfg.context_window else feats

    f_tr, f_ev = pooled(base_tr), pooled(base_ev)
    normal_tr = [~np.isin(s, special_ids) for s in train.input_ids]
    normal_ev = [~np.isin(s, special_ids) for s in held.input_ids]
    X_tr = torch.cat([f[torch.as_tensor(m)] for f, m in zip(f_tr, normal_tr)])
    X_ev = torch.cat([f[torch.as_tensor(m)] for f, m in zip(f_ev, normal_ev)])

    def sel(labels, masks):
        return np.concatenate([np.asarray(lab)[m] for lab, m in zip(labels, masks)])

    y_ev = sel(truth_held, normal_ev)
    rng = np.random.default_rng(cfg.seed)
    # logistic fit on a sample
    keep = np.sort(rng.choice(len(X_tr), min(len(X_tr), cfg.fit_tokens), replace=False))

    def fit_tokens(y):
        return LogisticHead.fit(X_tr[torch.as_tensor(keep)], np.asarray(y)[keep])

    def per_seq(head, feats, masks):
        out = []
        for f, m in zip(feats, masks):
            p = head(f).numpy().astype(np.float32)
            p[~m] = 0.0
            out.append(p)
        return out

    head_weak = fit_tokens(sel(weak, normal_tr))
    if save_dir is not None:
        head_weak.save(Path(save_dir) / "token_head.safetensors")
    sweep_weak = threshold_sweep(head_weak(X_ev).numpy(), y_ev, cfg.thresholds)
    sweep_gt = threshold_sweep(fit_tokens(sel(truth_train, normal_tr))(X_ev).numpy(), y_ev, cfg.thresholds)
    noise = []
    for p in cfg.noise_ps:
        noisy = add_label_noise(sel(weak, normal_tr), p, seed=cfg.seed + 7)
        noise.append({"p": p,
                      "auroc": threshold_sweep(fit_tokens(noisy)(X_ev).numpy(), y_ev, [0.5])["auroc"]})
    probs_tr = per_seq(head_weak, f_tr, normal_tr)

    # document classifier: mean-pooled features, weak document labels
    pooled_tr = torch.stack([f.mean(0) for f in base_tr])
    pooled_ev = torch.stack([f.mean(0) for f in base_ev])
    doc_weak = document_flags(weak, cfg.doc_label_fraction)
    doc_true_tr = document_flags(truth_train, cfg.doc_label_fraction)
    doc_true_ev = document_flags(truth_held, cfg.doc_label_fraction)
    doc_metrics = {}
    doc_probs_tr = None
    for name, y in (("weak", doc_weak), ("ground_truth", doc_true_tr)):
        if y.all() or not y.any():
            doc_metrics[name] = {"auroc": None, "note": "document labels are all one class"}
            continue
        head = LogisticHead.fit(pooled_tr, y)
        doc_metrics[name] = threshold_sweep(head(pooled_ev).numpy(), doc_true_ev, [cfg.doc_threshold])
        if name == "weak":
            doc_probs_tr = head(pooled_tr).numpy()
    if doc_probs_tr is None:  # degenerate weak document labels: rank documents by their weak fraction
        doc_probs_tr = np.array([float(np.mean(w)) for w in weak], dtype=np.float32)
    metrics = {"token_classifier": {"weak": sweep_weak, "ground_truth": sweep_gt}, "classifier_noise": noise,
               "document_classifier": doc_metrics}
    return TokenClassifiers(probs=probs_tr, doc_probs=np.asarray(doc_probs_tr), metrics=metrics)
