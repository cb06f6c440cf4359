"""Membership inference: does the model treat an example as one it was trained on?

OpenUnlearning's six scores of a text (or of a continuation given a prefix) under a causal LM: four
reference-free ones from one forward pass (loss, zlib, Min-K%, Min-K%++), GradNorm (a backward pass per
example) and the reference-model score (a second model); their ROC AUC between members and non-members,
and MUSE's PrivLeak. Every score here is a member score (higher = more likely a member). Scores,
tokenisation and PrivLeak: docs/evaluation.md, section "Membership inference".
"""

from __future__ import annotations

import functools
import math
import warnings
import zlib
from collections.abc import Sequence

import numpy as np
import torch

from obliviate.data import clip_chars, collate
from obliviate.errors import ConfigError, DataError
from obliviate.eval.core import check_logits, fit_context, model_max_length
from obliviate.eval.metric import FORGET, HOLDOUT, REFERENCE, MetricRun, register_metric
from obliviate.losses import at_least_float32
from obliviate.models.layers import evaluating
from obliviate.models.tokenizer import bos_prefix, pad_id

SCORES = ("loss", "zlib", "min_k", "min_k_plus_plus")
"""The member scores :func:`mia_scores` returns, in order."""
ALL_SCORES = SCORES + ("gradnorm", "reference")
"""OpenUnlearning's six MIAs (``mia_loss``, ``mia_zlib``, ``mia_min_k``, ``mia_min_k_plus_plus``,
``mia_gradnorm``, ``mia_reference``): :data:`SCORES`, :func:`gradnorm_scores` and :func:`reference_scores`."""
GRADNORM_P = 2
"""The gradient norm of OpenUnlearning's ``mia_gradnorm`` (its ``p``; 1, 2 and inf are accepted, as there)."""

_VAR_FLOOR = 1e-6
"""Min-K%++ divides by sigma_t = sqrt(max(var_t, 1e-6)), as OpenUnlearning clamps the variance
(``clamp(min=1e-6)``): a very confident position (a near one-hot distribution) gets a bounded z rather than a
huge one."""

_CHUNK_ELEMENTS = 1 << 24
"""Positions x vocabulary entries handled at once in float64 (128 MB), to bound memory on large
vocabularies."""


# ------------------------------------------------------------------ token statistics

def _encode(tokenizer, texts: Sequence[str], prefixes: Sequence[str | None], limit: int | None,
            add_eos: bool) -> tuple[list[tuple[list[int], int]], int]:
    """(token ids, number of context tokens) per example, and how many examples were cut."""
    eos = tokenizer.eos_token_id
    head = bos_prefix(tokenizer)
    bos = head[0] if head else None
    out, n_cut = [], 0
    for i, (text, prefix) in enumerate(zip(texts, prefixes)):
        if not isinstance(text, str) or not (prefix is None or isinstance(prefix, str)):
            raise DataError(f"example {i + 1}: texts and prefixes must be strings, got "
                            f"{type(text).__name__} and {type(prefix).__name__}")
        ctx = head + (
            tokenizer(clip_chars(prefix, limit), add_special_tokens=False)["input_ids"] if prefix else [])
        cont = list(tokenizer(clip_chars(text, limit, "start"), add_special_tokens=False)["input_ids"]) + (
            [eos] if add_eos and eos is not None else [])
        if not ctx and cont:  # no bos and no prefix: the first token has nothing to be predicted from
            ctx, cont = cont[:1], cont[1:]
        ctx, cont, cut = fit_context(list(ctx), cont, limit, bos)
        n_cut += bool(cut or clip_chars(text, limit, "start") != text or clip_chars(prefix, limit) != prefix)
        if not cont:
            raise DataError(f"example {i + 1} has no token to score (text {text[:40]!r}"
                            + (f", prefix {prefix[:40]!r}" if prefix else "") + ")")
        out.append((ctx + cont, len(ctx)))
    return out, n_cut


def _row_stats(logits: torch.Tensor, targets: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """log p of ``targets`` under ``logits`` (n, V), and the mean and std of log p(z) for z ~ p, in
    float64."""
    step = max(1, _CHUNK_ELEMENTS // max(1, logits.shape[-1]))
    lp_out, mu_out, sd_out = [], [], []
    for s in range(0, logits.shape[0], step):
        lp = torch.log_softmax(logits[s:s + step].double(), dim=-1)  # (m, V)
        p = lp.exp()
        mu = (p * lp).sum(-1)
        # E[(log p - mu)^2]: never negative, unlike E[lp^2] - mu^2
        var = (p * (lp - mu[:, None]).square()).sum(-1)
        lp_out.append(lp.gather(-1, targets[s:s + step, None]).squeeze(-1))
        mu_out.append(mu)
        sd_out.append(var.sqrt())
    return tuple(torch.cat(x).cpu().numpy() for x in (lp_out, mu_out, sd_out))


@torch.no_grad()
@evaluating
def token_logprob_stats(model, tokenizer, texts: Sequence[str], prefixes: Sequence[str | None] | None = None,
                        batch_size: int = 16, max_len: int | None = None, *,
                        add_eos: bool = True) -> list[dict]:
    """Per example, the scored tokens' log-probabilities and the mean / std of the next-token log-probability.

    Returns, for each text (in order), a dict of float64 / int64 arrays of length ``n`` (the scored
    tokens: the text's, or the continuation's given ``prefixes[i]``, plus eos; see the module docstring):

    - ``token_ids``: the scored tokens ``x_t``;
    - ``token_logprobs``: ``l_t = log p(x_t | x_<t)``;
    - ``mu``: ``mu_t = E_{z ~ p(.|x_<t)}[log p(z | x_<t)] = sum_z p(z|x_<t) log p(z|x_<t)`` (minus the
      entropy);
    - ``sigma``: ``sigma_t = sqrt(E_{z ~ p(.|x_<t)}[(log p(z | x_<t) - mu_t)^2])``;
    - ``greedy``: ``argmax_z p(z | x_<t)``, the token greedy decoding predicts at each scored position given
      the true prefix (exact memorization and extraction strength, :mod:`obliviate.eval.memorization`)

    (``mu`` and ``sigma`` are Min-K%++'s normalisers, Zhang et al. 2024, arXiv:2404.02936). One forward
    pass per batch of ``batch_size`` examples (sorted by length, to pad little); the statistics are
    computed in float64. ``max_len`` defaults to the model's context
    (:func:`obliviate.eval.core.model_max_length`). ``prefixes`` may hold ``None`` or ``""`` for
    "no prefix".
    """
    texts = list(texts)
    prefixes = [None] * len(texts) if prefixes is None else list(prefixes)
    if len(prefixes) != len(texts):
        raise DataError(f"token_logprob_stats: {len(texts)} texts but {len(prefixes)} prefixes")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not texts:
        return []
    limit = model_max_length(model) if max_len is None else max_len
    if limit is not None and limit < 2:
        raise ConfigError(f"max_len={limit} leaves no token to score (need at least 2 positions)")
    encoded, n_cut = _encode(tokenizer, texts, prefixes, limit, add_eos)
    if n_cut:
        warnings.warn(f"token_logprob_stats: {n_cut} of {len(texts)} examples were cut to fit {limit} "
                      "positions (prefix from the left, then the text from the right)", stacklevel=2)
    pad = pad_id(tokenizer)
    device = next(model.parameters()).device
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i][0]))
    out: list[dict | None] = [None] * len(encoded)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        batch = collate([np.asarray(encoded[i][0], dtype=np.int64) for i in idx], pad)
        ids = batch["input_ids"].to(device)
        logits = model(input_ids=ids, attention_mask=batch["attention_mask"].to(device)).logits
        check_logits(logits, batch["attention_mask"].to(device), "membership inference")
        for row, i in enumerate(idx):
            seq, n_ctx = encoded[i]
            n = len(seq)
            targets = ids[row, n_ctx:n]
            lp, mu, sigma = _row_stats(logits[row, n_ctx - 1:n - 1], targets)
            out[i] = {"token_ids": targets.cpu().numpy().astype(np.int64), "token_logprobs": lp,
                      "mu": mu, "sigma": sigma,
                      "greedy": logits[row, n_ctx - 1:n - 1].argmax(-1).cpu().numpy().astype(np.int64)}
    return out


# ------------------------------------------------------------------ per-example scores

def _check_k(k: float) -> float:
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 1:
        raise ConfigError(f"k must be a fraction in (0, 1], got {k!r}")
    return float(k)


def _lowest_mean(values: np.ndarray, k: float) -> float:
    """Mean of the ``max(1, floor(k n))`` lowest of ``values``."""
    m = max(1, int(len(values) * _check_k(k)))
    return float(np.mean(np.sort(values)[:m]))


def loss_score(stats: dict) -> float:
    """LOSS attack (Yeom et al. 2018, "Privacy Risk in Machine Learning: Analyzing the Connection to
    Overfitting", the loss-threshold adversary): member score = ``-L(x)`` with ``L(x) = -(1/n) sum_t l_t``
    the mean token NLL. Members have lower loss, hence higher score."""
    return float(np.mean(stats["token_logprobs"]))


def zlib_score(stats: dict, text: str) -> float:
    """zlib-ratio attack (Carlini et al. 2021, "Extracting Training Data from Large Language Models",
    arXiv:2012.07805, the ratio of the log-perplexity to the zlib entropy): member score =
    ``-L(x) / len(zlib.compress(text))``, with ``L(x)`` the *mean* token NLL (the log-perplexity) and
    the zlib entropy counted in bytes of ``zlib.compress(text.encode("utf-8"))`` at the default level.

    This is MUSE's definition (swj0419/muse_bench ``PPL/zlib`` = HF mean loss / compressed length),
    the same as the Min-K% and Min-K%++ reference code (log of the perplexity, i.e. the mean NLL, over
    the compressed length); MUSE reports the ratio itself (higher = non-member), we its negation.
    ``text`` is the scored text: the continuation of a (prefix, continuation) pair.
    """
    return float(np.mean(stats["token_logprobs"])) / len(zlib.compress(text.encode("utf-8")))


def min_k_score(stats: dict, k: float = 0.2) -> float:
    """Min-K% Prob (Shi et al. 2023, "Detecting Pretraining Data from Large Language Models",
    arXiv:2310.16789): member score = ``(1/|S|) sum_{t in S} l_t``, ``S`` the ``max(1, floor(k n))``
    tokens with the lowest ``l_t`` (k = 20% by default; at least one token, as Open-Unlearning does;
    the paper's code takes ``int(k n)``). Members have few very unlikely tokens, hence a higher score.
    MUSE (``Min-k%``) and the paper's code report the negation."""
    return _lowest_mean(np.asarray(stats["token_logprobs"], dtype=np.float64), k)


def min_k_plus_plus_score(stats: dict, k: float = 0.2) -> float:
    """Min-K%++ (Zhang et al. 2024, "Min-K%++: Improved Baseline for Detecting Pre-Training Data from
    Large Language Models", arXiv:2404.02936): per token ``z_t = (l_t - mu_t) / sigma_t`` with
    ``mu_t = E_{z~p(.|x_<t)}[log p(z|x_<t)]`` and ``sigma_t`` the standard deviation of ``log p(z|x_<t)``
    under the same distribution (see :func:`token_logprob_stats`); member score = the mean of the
    ``max(1, floor(k n))`` lowest ``z_t``. Training tokens sit near a local maximum of the likelihood
    (a mode of ``p(.|x_<t)``), so their ``z_t`` are high. The variance is clamped at 1e-6 (``sigma_t`` at
    1e-3), as OpenUnlearning does, so very confident positions do not dominate."""
    lp = np.asarray(stats["token_logprobs"], dtype=np.float64)
    sigma = np.sqrt(np.maximum(np.square(np.asarray(stats["sigma"], dtype=np.float64)), _VAR_FLOOR))
    z = (lp - np.asarray(stats["mu"], dtype=np.float64)) / sigma
    return _lowest_mean(z, k)


def _scores_of(stats: list[dict], texts: list[str], k: float) -> dict[str, np.ndarray]:
    return {
        "loss": np.array([loss_score(s) for s in stats], dtype=np.float64),
        "zlib": np.array([zlib_score(s, t) for s, t in zip(stats, texts)], dtype=np.float64),
        "min_k": np.array([min_k_score(s, k) for s in stats], dtype=np.float64),
        "min_k_plus_plus": np.array([min_k_plus_plus_score(s, k) for s in stats], dtype=np.float64),
    }


def mia_scores(model, tokenizer, texts: Sequence[str], prefixes: Sequence[str | None] | None = None,
               k: float = 0.2,
               batch_size: int = 16, max_len: int | None = None, *,
               add_eos: bool = True) -> dict[str, np.ndarray]:
    """The four member scores of each text (higher = more likely a member): ``{name: (N,) float64}`` for
    ``name`` in :data:`SCORES` (``loss``: :func:`loss_score`, ``zlib``: :func:`zlib_score`, ``min_k``:
    :func:`min_k_score`, ``min_k_plus_plus``: :func:`min_k_plus_plus_score`), from one
    :func:`token_logprob_stats` pass; ``k`` is the Min-K% / Min-K%++ fraction."""
    _check_k(k)
    texts = list(texts)
    stats = token_logprob_stats(model, tokenizer, texts, prefixes, batch_size=batch_size, max_len=max_len,
                                add_eos=add_eos)
    return _scores_of(stats, texts, k)


def _check_p(p) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or float(p) not in (1.0, 2.0, math.inf):
        raise ConfigError(f"the GradNorm norm p must be 1, 2 or inf, got {p!r}")
    return float(p)


@evaluating
def gradnorm_scores(model, tokenizer, texts: Sequence[str], prefixes: Sequence[str | None] | None = None,
                    p: float = GRADNORM_P, max_len: int | None = None, *, add_eos: bool = True) -> np.ndarray:
    """GradNorm (the gradient-norm MIA as Duan et al. 2024, "Do Membership Inference Attacks Work on Large
    Language Models?", arXiv:2402.17012, run it on LLMs; OpenUnlearning's ``mia_gradnorm``,
    ``GradNormAttack``): per example, the loss ``L'(x) = -(1/(n-1)) sum_{t<n} l_t`` over the scored tokens but
    the last (OpenUnlearning's ``tokenwise_logprobs`` leaves out the last labelled token, the eos where one is
    scored; an example with one scored token keeps it), back-propagated alone, and

        g(x) = (1/|P|) sum_{theta in P} ||grad_theta L'(x)||_p

    the mean over the parameter tensors ``P`` that receive a gradient of each tensor's p-norm (p = 2, the
    flattened tensor's norm, by default). Member score = ``-g(x)``: a training example sits near a minimum
    of its loss, so its gradient is small. OpenUnlearning labels the holdout 1 and scores ``g`` itself, so
    its AUC equals :func:`mia_auc` of these scores (members labelled 1).

    One forward and one backward pass per example, in eval mode (no dropout), unpadded; every parameter's
    ``.grad`` is put back as it was. Tokenisation and cutting as :func:`token_logprob_stats`.
    """
    p = _check_p(p)
    texts = list(texts)
    prefixes = [None] * len(texts) if prefixes is None else list(prefixes)
    if len(prefixes) != len(texts):
        raise DataError(f"gradnorm_scores: {len(texts)} texts but {len(prefixes)} prefixes")
    if not texts:
        return np.zeros(0)
    limit = model_max_length(model) if max_len is None else max_len
    encoded, n_cut = _encode(tokenizer, texts, prefixes, limit, add_eos)
    if n_cut:
        warnings.warn(f"gradnorm_scores: {n_cut} of {len(texts)} examples were cut to fit {limit} positions",
                      stacklevel=2)
    params = [q for q in model.parameters() if q.requires_grad]
    if not params:
        raise ConfigError("GradNorm needs gradients, but no parameter of the model requires grad")
    device = next(model.parameters()).device
    saved = [q.grad for q in params]
    out = np.zeros(len(encoded))
    try:
        with torch.enable_grad():
            for i, (seq, n_ctx) in enumerate(encoded):
                for q in params:
                    q.grad = None
                ids = torch.tensor([seq], dtype=torch.long, device=device)
                logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0]
                check_logits(logits, None, "GradNorm")
                lp = torch.log_softmax(at_least_float32(logits[n_ctx - 1:len(seq) - 1]), dim=-1)
                lp = lp.gather(-1, ids[0, n_ctx:, None]).squeeze(-1)
                loss = -(lp[:-1] if lp.numel() > 1 else lp).mean()
                loss.backward()
                norms = [torch.linalg.vector_norm(q.grad.detach().double(), ord=p) for q in params
                         if q.grad is not None]
                if not norms:
                    raise ConfigError("GradNorm: the loss reached no parameter of the model")
                out[i] = -float(torch.stack(norms).mean())
    finally:
        for q, g in zip(params, saved):
            q.grad = g
    return out


def _common_limit(*models) -> int | None:
    """The shortest context of ``models`` (None when none has one)."""
    limits = [x for x in (model_max_length(m) for m in models) if x is not None]
    return min(limits) if limits else None


def reference_scores(model, reference_model, tokenizer, texts: Sequence[str],
                     prefixes: Sequence[str | None] | None = None, batch_size: int = 16,
                     max_len: int | None = None,
                     *, add_eos: bool = True, stats: list[dict] | None = None) -> np.ndarray:
    """Reference-model MIA (Carlini et al. 2021, arXiv:2012.07805, the reference-model comparison; the
    difficulty calibration of Watson et al. 2022; OpenUnlearning's ``mia_reference``, ``ReferenceAttack``):
    member score = ``L_ref(x) - L(x)``, the mean token NLL of the scored tokens (eos included, as
    OpenUnlearning's ``evaluate_probability`` averages every labelled token) under the reference model minus
    under ``model``. An example the model fits better than a model that never trained on it looks like a
    member. OpenUnlearning scores ``L(x) - L_ref(x)`` with the holdout labelled 1: the same AUC.

    ``reference_model`` must share ``tokenizer`` (OpenUnlearning's TOFU example is the retain model,
    ``tofu_..._retain90``). ``stats``: ``model``'s :func:`token_logprob_stats` of the same texts, if at hand.
    """
    texts = list(texts)
    limit = max_len if max_len is not None else _common_limit(model, reference_model)
    kw = {"batch_size": batch_size, "max_len": limit, "add_eos": add_eos}
    mine = stats if stats is not None else token_logprob_stats(model, tokenizer, texts, prefixes, **kw)
    ref = token_logprob_stats(reference_model, tokenizer, texts, prefixes, **kw)
    for i, (a, b) in enumerate(zip(mine, ref)):
        if not np.array_equal(a["token_ids"], b["token_ids"]):
            raise DataError(f"reference_scores: example {i + 1} is scored on different tokens by the two "
                            "models (pass the same max_len, or the stats of the same texts)")
    return np.array([loss_score(a) - loss_score(b) for a, b in zip(mine, ref)], dtype=np.float64)


# ------------------------------------------------------------------ AUC and PrivLeak

def mia_auc(member_scores, nonmember_scores) -> float:
    """ROC AUC of member scores against non-member scores (``sklearn.metrics.roc_auc_score``, members
    labelled 1): the probability that a random member outscores a random non-member, ties counting one
    half. 1.0 = perfectly separated, 0.5 = chance (or all ties), 0.0 = perfectly reversed."""
    from sklearn.metrics import roc_auc_score

    pos = np.asarray(member_scores, dtype=np.float64).ravel()
    neg = np.asarray(nonmember_scores, dtype=np.float64).ravel()
    if not pos.size or not neg.size:
        raise DataError(f"mia_auc needs members and non-members; got {pos.size} and {neg.size}")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise DataError("mia_auc: scores must be finite (found NaN or inf)")
    y = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
    return float(roc_auc_score(y, np.concatenate([pos, neg])))


def priv_leak(auc_model: float, auc_retrain: float) -> float:
    """MUSE's PrivLeak (Shi et al. 2024, "MUSE: Machine Unlearning Six-Way Evaluation for Language
    Models", arXiv:2407.06460): ``(AUC_unlearn - AUC_retrain) / AUC_retrain``, as a fraction
    (MUSE's tables show it times 100), from AUCs as :func:`mia_auc` computes them (members = forget set,
    labelled 1; non-members = holdout; higher score = member).

    MUSE's AUC is the other way round: muse_bench's ``forget_holdout_Min-40%`` labels the *holdout* 1
    and the *forget* set 0 with score ``-Min-k%`` (MUSE's README: the first split is the non-member
    data), so it equals ``1 - AUC`` in our convention (Open-Unlearning's ``privleak`` makes the same
    ``1 - x`` conversion for this reason). This function converts, so its value is MUSE's:

        priv_leak = ((1 - auc_model) - (1 - auc_retrain)) / (1 - auc_retrain)
                  = (auc_retrain - auc_model) / (1 - auc_retrain).

    Sign, as in MUSE: 0 = the unlearned model tells forget from holdout as well as a model never
    trained on the forget set; negative = under-unlearning (forget examples still look like members:
    the target model is near -1, i.e. MUSE's -100%); positive = over-unlearning (forget examples look
    *less* member-like than unseen text). Undefined (DataError) when ``auc_retrain`` is 1.
    """
    for name, v in (("auc_model", auc_model), ("auc_retrain", auc_retrain)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not 0 <= v <= 1:
            raise DataError(f"priv_leak: {name} must be an AUC in [0, 1], got {v!r}")
    if math.isclose(float(auc_retrain), 1.0):
        raise DataError("priv_leak: the retrained model's AUC is 1 (MUSE's AUC 0), so PrivLeak is undefined")
    muse_model, muse_retrain = 1.0 - float(auc_model), 1.0 - float(auc_retrain)
    return (muse_model - muse_retrain) / muse_retrain


def split_examples(examples, what: str, who: str = "mia_metrics") -> tuple[list[str], list[str | None]]:
    """Texts and prefixes from a list of texts and/or (prefix, continuation) pairs."""
    texts, prefixes = [], []
    for i, ex in enumerate(examples):
        if isinstance(ex, str):
            texts.append(ex)
            prefixes.append(None)
        elif isinstance(ex, (tuple, list)) and len(ex) == 2 and all(isinstance(x, str) for x in ex):
            prefixes.append(ex[0])
            texts.append(ex[1])
        else:
            raise DataError(f"{what}[{i}] must be a text or a (prefix, "
                            f"continuation) pair of strings, got {ex!r:.80}")
    if not texts:
        raise DataError(f"{who}: no {what}")
    return texts, prefixes


def mia_metrics(model, tokenizer, members, nonmembers, k: float = 0.2, batch_size: int = 16, *,
                max_len: int | None = None, add_eos: bool = True, extra_ks: Sequence[float] = (),
                gradnorm: bool = False, p: float = GRADNORM_P, reference_model=None) -> dict:
    """MIA AUC of each score, forget vs holdout: ``mia_auc_loss``, ``mia_auc_zlib``, ``mia_auc_min_k``,
    ``mia_auc_min_k_plus_plus``; for each other fraction in ``extra_ks``, ``mia_auc_min_k_k<100 k>`` and
    ``mia_auc_min_k_plus_plus_k<100 k>`` too (``_k20`` for 0.2), from the same forward pass. With
    ``gradnorm``, ``mia_auc_gradnorm`` (:func:`gradnorm_scores`, norm ``p``); with a ``reference_model``,
    ``mia_auc_reference`` (:func:`reference_scores`): OpenUnlearning's six.

    ``members`` are the forget examples, ``nonmembers`` the holdout ones; each a list of texts or of
    ``(prefix, continuation)`` pairs (only the continuation is scored). An AUC near 0.5 means the
    model does not tell them apart (what a model never trained on the forget set gives, when forget
    and holdout come from one distribution); near 1, the forget set still looks trained on. Feed
    the unlearned and the retrained model's ``mia_auc_*`` to :func:`priv_leak` for MUSE's PrivLeak.
    """
    _check_k(k)
    if gradnorm:
        _check_p(p)
    m_texts, m_prefixes = split_examples(members, "members")
    n_texts, n_prefixes = split_examples(nonmembers, "nonmembers")
    texts, prefixes = m_texts + n_texts, m_prefixes + n_prefixes
    if reference_model is not None and max_len is None:  # both models score the same tokens
        max_len = _common_limit(model, reference_model)
    stats = token_logprob_stats(model, tokenizer, texts, prefixes, batch_size=batch_size, max_len=max_len,
                                add_eos=add_eos)
    scores = _scores_of(stats, texts, k)
    n = len(m_texts)
    out = {f"mia_auc_{name}": mia_auc(scores[name][:n], scores[name][n:]) for name in SCORES}
    for x in [float(x) for x in dict.fromkeys(_check_k(x) for x in extra_ks) if not math.isclose(x, k)]:
        tag = f"k{round(100 * x)}"
        for name, fn in (("min_k", min_k_score), ("min_k_plus_plus", min_k_plus_plus_score)):
            vals = np.array([fn(s, x) for s in stats], dtype=np.float64)
            out[f"mia_auc_{name}_{tag}"] = mia_auc(vals[:n], vals[n:])
    if gradnorm:
        g = gradnorm_scores(model, tokenizer, texts, prefixes, p=p, max_len=max_len, add_eos=add_eos)
        out["mia_auc_gradnorm"] = mia_auc(g[:n], g[n:])
    if reference_model is not None:
        r = reference_scores(model, reference_model, tokenizer, texts, prefixes, batch_size=batch_size,
                             max_len=max_len, add_eos=add_eos, stats=stats)
        out["mia_auc_reference"] = mia_auc(r[:n], r[n:])
    return out


# ------------------------------------------------------------------ the registered metrics (OpenUnlearning's
# six)

def _mia(run: MetricRun) -> dict:
    """:func:`mia_metrics` of the forget data against the holdout, once for every MIA the call computes
    (GradNorm and the reference model's only where asked for)."""
    return run.once("mia", lambda: mia_metrics(
        run.model, run.tokenizer, run.forget, run.holdout, k=run.k, batch_size=run.batch_size,
        add_eos=run.add_eos,
        gradnorm="mia_gradnorm" in run.wanted, p=run.p,
        reference_model=run.reference_model if "mia_reference" in run.wanted else None))


def _auc(key: str, run: MetricRun) -> float:
    return _mia(run)[key]


for _score in SCORES:
    register_metric(f"mia_{_score}", key=f"mia_auc_{_score}", needs=[FORGET, HOLDOUT],
                    help=f"ROC AUC of the {_score} member score, forget "
                         "(members) vs holdout (obliviate.eval.mia)")(
        functools.partial(_auc, f"mia_auc_{_score}"))
del _score
register_metric("mia_gradnorm", key="mia_auc_gradnorm", needs=[FORGET, HOLDOUT],
                help="ROC AUC of minus the per-example gradient norm, forget vs holdout "
                     "(obliviate.eval.mia.gradnorm_scores)")(functools.partial(_auc, "mia_auc_gradnorm"))
register_metric("mia_reference", key="mia_auc_reference", needs=[FORGET, HOLDOUT, REFERENCE],
                help="ROC AUC of L_ref(x) - L(x), forget vs holdout, against a reference model "
                     "(obliviate.eval.mia.reference_scores)")(functools.partial(_auc, "mia_auc_reference"))
