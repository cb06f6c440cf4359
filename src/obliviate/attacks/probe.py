"""Linear-probe attack: is the answer still linearly readable from the hidden states?

For every MCQ and each of its choices, the text ``qa_prompt(question) + " " + choice`` is
run through the model and the hidden state (output of decoder layer l, see
:mod:`obliviate.models.layers`) at its last token is kept. A logistic-regression probe
(scikit-learn) learns "is this the correct choice" on the choices of a seeded train split
of the MCQs; on each held-out MCQ the choice with the highest probe score is the
prediction. Accuracy is the fraction of held-out MCQs answered correctly (chance 1/4 for
4 choices). A model that only hides its answers keeps this accuracy high even when its
greedy answers are wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from obliviate.data import qa_prompt
from obliviate.errors import ConfigError, DataError


def probe_texts(mcqs: Sequence[dict], prompt_fn=None) -> list[str]:
    """The cloze texts, MCQ-major: ``prompt_fn(q) + " " + choice`` for each choice of each MCQ
    (``prompt_fn`` defaults to the world's :func:`~obliviate.data.qa_prompt`)."""
    prompt_fn = prompt_fn or qa_prompt
    return [prompt_fn(m["question"]) + " " + c for m in mcqs for c in m["choices"]]


@torch.no_grad()
def last_token_hidden(model, tokenizer, texts: Sequence[str], layers: Sequence[int],
                      batch_size: int = 64) -> dict[int, np.ndarray]:
    """``{l: (N, d_model)}`` float32 hidden states of layer ``l`` at the last token of each text (bos prepended)."""
    from obliviate.data import collate
    from obliviate.models.layers import hidden_states_at

    bos = tokenizer.bos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ConfigError("tokenizer has neither a pad nor an eos token to pad batches with")
    seqs = [np.asarray(([bos] if bos is not None else []) + tokenizer(t, add_special_tokens=False)["input_ids"])
            for t in texts]
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: dict[int, list[np.ndarray]] = {l: [] for l in layers}
    try:
        for s in range(0, len(seqs), batch_size):
            chunk = seqs[s:s + batch_size]
            batch = collate(chunk, pad)  # right padding: the last real token is at len - 1
            ids, att = batch["input_ids"].to(dev), batch["attention_mask"].to(dev)
            hidden = hidden_states_at(model, ids, att, layers)
            last = torch.as_tensor([len(c) - 1 for c in chunk], device=dev)
            rows = torch.arange(len(chunk), device=dev)
            for l in layers:
                out[l].append(hidden[l][rows, last].float().cpu().numpy())  # (B, d)
    finally:
        model.train(was_training)
    return {l: np.concatenate(v) for l, v in out.items()}


def split_indices(n: int, train_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of ``range(n)`` into train (``round(train_frac * n)``, at least 1) and test (at least 1)."""
    if n < 2:
        raise DataError(f"a probe needs at least 2 MCQs (one to train, one to test), got {n}")
    if not 0 < train_frac < 1:
        raise ConfigError(f"train_frac must be in (0, 1), got {train_frac}")
    n_train = min(n - 1, max(1, int(round(train_frac * n))))
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:n_train]), np.sort(perm[n_train:])


def fit_choice_probe(features: np.ndarray, answer_index: Sequence[int], train_idx, test_idx,
                     C: float = 1.0, seed: int = 0) -> float:
    """Train a "correct choice?" logistic-regression probe and return held-out MCQ accuracy.

    ``features``: (n_mcq, n_choices, d); ``answer_index``: (n_mcq,). The probe is fit on all
    choices of the ``train_idx`` MCQs (standardised features, L2 penalty ``1 / C``); a test MCQ
    counts as correct when its correct choice has the highest decision score.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    feats = np.asarray(features, dtype=np.float64)
    if feats.ndim != 3:
        raise ValueError(f"features must be (n_mcq, n_choices, d), got shape {feats.shape}")
    n, k, d = feats.shape
    answers = np.asarray(answer_index, dtype=int)
    labels = np.zeros((n, k), dtype=int)
    labels[np.arange(n), answers] = 1
    train_idx, test_idx = np.asarray(train_idx, dtype=int), np.asarray(test_idx, dtype=int)
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000, random_state=seed))
    # A problem this small is slowed down, not sped up, by BLAS threads (badly so on a busy machine).
    with threadpool_limits(1):
        clf.fit(feats[train_idx].reshape(-1, d), labels[train_idx].reshape(-1))
        scores = clf.decision_function(feats[test_idx].reshape(-1, d)).reshape(len(test_idx), k)
    return float(np.mean(scores.argmax(1) == answers[test_idx]))


def linear_probe_attack(model, tokenizer, mcqs: Sequence[dict], layers: Sequence[int] | None = None,
                        train_frac: float = 0.5, seed: int = 0, C: float = 1.0, batch_size: int = 64,
                        prompt_fn=None) -> dict:
    """Probe accuracy per layer on held-out MCQs (see module docstring).

    ``mcqs``: dicts with ``question``, ``choices`` (same count for all) and ``answer_index``,
    e.g. ``world.mcqs(split="forget")``. ``layers``: decoder-layer indices (default: all).
    Returns ``{"per_layer": {l: acc}, "best_layer", "best_acc", "chance", "n_train", "n_test"}``.
    """
    from obliviate.models.layers import check_layer, num_layers

    if not mcqs:
        raise DataError("no MCQs to probe")
    n_choices = {len(m["choices"]) for m in mcqs}
    if len(n_choices) != 1:
        raise DataError(f"all MCQs need the same number of choices, got {sorted(n_choices)}")
    k = n_choices.pop()
    layers = list(range(num_layers(model))) if layers is None else [check_layer(model, l) for l in layers]
    if not layers:
        raise ConfigError("no layers to probe")
    train_idx, test_idx = split_indices(len(mcqs), train_frac, seed)
    hidden = last_token_hidden(model, tokenizer, probe_texts(mcqs, prompt_fn), layers, batch_size)
    answers = [m["answer_index"] for m in mcqs]
    per_layer = {l: fit_choice_probe(h.reshape(len(mcqs), k, -1), answers, train_idx, test_idx, C, seed)
                 for l, h in hidden.items()}
    best = max(per_layer, key=lambda l: (per_layer[l], -l))  # ties: the earliest layer
    return {"per_layer": per_layer, "best_layer": best, "best_acc": per_layer[best], "chance": 1.0 / k,
            "n_train": len(train_idx), "n_test": len(test_idx)}
