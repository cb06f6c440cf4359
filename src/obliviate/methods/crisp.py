"""CRISP: concept unlearning by suppressing SAE features (Ashuach et al. 2025; read in the paper and code).

The MLP partner of EMBER::

    L = (1 - beta) L_unlearn + beta L_reg + beta gamma L_coh,      beta = 0.99, gamma = 0.01

    L_unlearn = mean over target tokens (padding excluded) and selected features j of ReLU(pre_j(h_l))
    L_reg     = mean over benign tokens and dims of (h_l(theta) - h_l(frozen))^2       (at each SAE layer)
    L_coh     = the same MSE at the last decoder layer, on coherence prompts

Target text is the forget batch, benign text the retain batch, ``pre_j`` the SAE's ReLU pre-activation, and
the features j those that fire on at least ``min_ratio`` times as many target tokens as benign ones
(:func:`rank_features`). The paper uses pretrained JumpReLU SAEs; here the small TopK SAE of
:mod:`obliviate.filtering.sae` is trained on the frozen model's residual stream at each layer (no SAE library
that trains on a CPU is installed) — a reconstruction at tiny scale.

Details: docs/methods.md, "crisp" under "Method details".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from obliviate.data import text_batches
from obliviate.config import check_ranges
from obliviate.errors import ConfigError, DataError
from obliviate.losses import hidden_mse, masked_mean
from obliviate.unlearning.contract import LR_STEPS_SEARCH, Method, register
from obliviate.models.layers import (check_layer, hidden_states_at, num_layers, param_names_for,
                                     states_over_batches)
from obliviate.filtering.sae import train_sae

BETA = 0.99
GAMMA = 0.01
MIN_RATIO = 3.0

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ feature selection

def firing_counts(codes: torch.Tensor) -> torch.Tensor:
    """Per feature, the number of rows (tokens) with a code > 0: ``(N, m) -> (m,)`` long."""
    if codes.dim() != 2:
        raise DataError(f"CRISP: codes must be (N_tokens, n_latents), got shape {tuple(codes.shape)}")
    return (codes > 0).sum(0)


def feature_scores(target_counts: torch.Tensor,
                   benign_counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(score = t - b, ratio = t / b)`` per feature; ratio is inf where b = 0 < t and 0 where t = 0."""
    t, b = target_counts.double(), benign_counts.double()
    if t.shape != b.shape:
        raise DataError(f"CRISP: target counts {tuple(t.shape)} and benign counts {tuple(b.shape)} differ")
    ratio = torch.where(b > 0, t / b.clamp(min=1), torch.where(t > 0, math.inf, 0.0))
    return t - b, ratio


def rank_features(target_counts: torch.Tensor, benign_counts: torch.Tensor, min_ratio: float = MIN_RATIO,
                  top_k: int | None = 10) -> list[int]:
    """Features with ``t > 0`` and ``t / b >= min_ratio``, by score ``t - b`` (highest first), at most
    ``top_k``."""
    if top_k is not None and top_k < 1:
        raise ConfigError(f"CRISP: top_k={top_k!r} must be >= 1")
    score, ratio = feature_scores(target_counts, benign_counts)
    ok = (target_counts > 0) & (ratio >= min_ratio)
    order = sorted((int(j) for j in torch.nonzero(ok).flatten()), key=lambda j: (-float(score[j]), j))
    return order if top_k is None else order[:top_k]


def select_sae_features(sae, target_acts: torch.Tensor, benign_acts: torch.Tensor,
                        min_ratio: float = MIN_RATIO,
                        top_k: int | None = 10) -> tuple[list[int], dict]:
    """Encode target and benign activations (N, d) with ``sae`` and rank its features; returns (features,
    info)."""
    zt, zb = sae.encode_all(target_acts), sae.encode_all(benign_acts)
    t, b = firing_counts(zt), firing_counts(zb)
    feats = rank_features(t, b, min_ratio, top_k)
    return feats, {"target_fires": [int(t[j]) for j in feats], "benign_fires": [int(b[j]) for j in feats],
                   "n_target_tokens": len(zt), "n_benign_tokens": len(zb)}


def train_layer_sae(acts: torch.Tensor, n_latents: int, k: int, steps: int, lr: float = 1e-3, seed: int = 0):
    """A :class:`~obliviate.filtering.sae.TopKSAE` trained on ``acts`` (N, d) with the one training loop;
    frozen."""

    sae, info = train_sae(acts, n_latents, k, steps=steps, lr=lr, seed=seed, batch_size=min(256, len(acts)))
    for p in sae.parameters():
        p.requires_grad_(False)
    return sae, info


def fit_layer_saes(target: dict[int, torch.Tensor], benign: dict[int, torch.Tensor], layers: Sequence[int],
                   n_latents: int | None, k: int, steps: int, lr: float, seed: int,
                   min_ratio: float = MIN_RATIO,
                   top_k: int | None = None) -> tuple[dict, dict, dict]:
    """One SAE per layer on target + benign activations ``{l: (N, d)}`` (``n_latents`` None: 4 d), then its
    features (:func:`select_sae_features`): ``(saes, features, info)``, each keyed by layer."""
    saes, features, info = {}, {}, {}
    for l in layers:
        acts = torch.cat([target[l], benign[l]])
        m = n_latents or 4 * acts.shape[1]
        sae, sae_info = train_layer_sae(acts, m, min(k, m), steps, lr, seed + l)
        feats, layer_info = select_sae_features(sae, target[l], benign[l], min_ratio, top_k)
        if not feats:
            log.warning("CRISP: no SAE feature at layer %d fires >= %.3g x more on target than benign text",
                        l, min_ratio)
        saes[l], features[l] = sae, feats
        info[l] = {**layer_info, "features": feats, "sae_fvu": sae_info["fvu"]}
    return saes, features, info


# ------------------------------------------------------------------ loss terms

def unlearn_term(sae, h: torch.Tensor, mask: torch.Tensor | None, features: Sequence[int]) -> torch.Tensor:
    """L_unlearn at one layer: mean over valid tokens and ``features`` of ReLU(pre-activation); h (B, T,
    d)."""
    if len(features) == 0:
        return h.sum() * 0.0  # keeps the graph; no feature, nothing to push
    idx = torch.as_tensor(list(features), dtype=torch.long, device=h.device)
    pre = sae.pre_activations(h.to(sae.W_enc.dtype))[..., idx]  # (B, T, |S|)
    act = torch.relu(pre).mean(-1)  # (B, T)
    return act.mean() if mask is None else masked_mean(act, mask.bool())


def reg_term(h: torch.Tensor, h_ref: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """L_reg / L_coh: hidden-state MSE to the frozen model over valid tokens."""
    return hidden_mse(h, h_ref, mask)


def crisp_terms(l_unlearn: torch.Tensor, l_reg: torch.Tensor, l_coh: torch.Tensor, beta: float = BETA,
                gamma: float = GAMMA) -> dict[str, torch.Tensor]:
    """Weighted terms ``{unlearn: (1-beta) Lu, reg: beta Lr, coh: beta gamma Lc}`` (they sum to the CRISP
    loss)."""
    return {"unlearn": (1.0 - beta) * l_unlearn, "reg": beta * l_reg, "coh": beta * gamma * l_coh}


# ------------------------------------------------------------------ the method

@dataclass
class CRISPConfig:
    layers: list[int] | None = None
    """SAE layers (residual stream after each); None = the middle layer (n_layers // 2)."""
    beta: float = BETA
    gamma: float = GAMMA
    min_ratio: float = MIN_RATIO
    """Keep features whose #target-firing / #benign-firing >= min_ratio."""
    top_k: int = 10
    """At most this many features per layer."""
    n_latents: int | None = None
    """SAE width; None = 4 * d_model."""
    sae_k: int = 8
    """Active latents per token of the TopK SAE (capped at n_latents)."""
    sae_steps: int = 200
    sae_lr: float = 1e-3
    target_texts: list[str] = field(default_factory=list)
    """Concept text for SAE training and feature selection (used by ``fit``)."""
    benign_texts: list[str] = field(default_factory=list)
    """Benign text for SAE training and feature selection (used by ``fit``)."""
    coherence_prompts: list[str] = field(default_factory=list)
    """Prompts for L_coh (used by ``fit``; none = L_coh on the retain batch)."""
    coherence_batch: int = 8
    """Coherence prompts per step (cycled)."""
    seed: int = 0

    def __post_init__(self):
        if not 0 <= self.beta <= 1:
            raise ConfigError(f"config key 'beta': must be in [0, 1], got {self.beta}")
        if self.gamma < 0:
            raise ConfigError(f"config key 'gamma': must be >= 0, got {self.gamma}")
        if self.top_k < 1 or self.sae_k < 1 or self.sae_steps < 1 or self.coherence_batch < 1:
            raise ConfigError("config keys 'top_k', 'sae_k', 'sae_steps', 'coherence_batch': must be >= 1")
        if self.layers is not None and not self.layers:
            raise ConfigError("config key 'layers': needs at least one layer (or null for the middle one)")
        if bool(self.target_texts) != bool(self.benign_texts):
            raise ConfigError("config keys 'target_texts' and 'benign_texts': give both or neither")
        check_ranges(self, positive=("sae_lr",), nonnegative=("min_ratio",), at_least_one=("n_latents",),
                     indices=("layers",))


@register("crisp", paper="Ashuach et al. 2025, CRISP",
          equation=("(1 − β) mean ReLU(SAE pre-activations of the selected features) on forget text + β · "
                    "hidden MSE to the frozen model on benign text "
                    "+ β γ · last-layer MSE on coherence prompts"),
          trains="MLP down-projections",
          search=LR_STEPS_SEARCH)
class CRISP(Method):
    config_cls = CRISPConfig
    needs_reference = True

    @property
    def multiprocess_unsupported(self) -> str | None:
        """Why it cannot run in several processes as configured (None once the SAEs are fitted)."""
        if self.saes is None:
            return ("without target_texts and benign_texts it trains its SAEs and picks features on the "
                    "first training batch, of which each process sees different rows; set both so that they "
                    "are fitted before training")
        return None

    def __init__(self, cfg: CRISPConfig):
        super().__init__(cfg)
        self.layers: list[int] | None = None
        self.saes: dict[int, object] | None = None
        self.features: dict[int, list[int]] = {}
        self.info: dict[int, dict] = {}
        self.coherence: dict | None = None
        self.coherence_ref: torch.Tensor | None = None
        """The frozen last-layer states of every coherence prompt (n, T, d), when the reference is a cache."""
        self._coh_pos = 0
        self.last: int | None = None

    def resolve_layers(self, model) -> list[int]:
        layers = self.cfg.layers if self.cfg.layers is not None else [num_layers(model) // 2]
        self.layers = sorted({check_layer(model, int(l)) for l in layers})
        self.last = num_layers(model) - 1
        return self.layers

    def cached_hidden_layers(self) -> dict[str, tuple[int, ...]]:
        # L_reg reads the retain examples at the SAE layers; L_coh reads them at the last layer unless
        # coherence
        # prompts are given (their states are cached in setup); both mask the padding
        last = () if self.coherence is not None else (self.last,)
        return {"retain": (*self.layers, *last)}  # make_reference sorts them and drops repeats

    def trainable(self, model) -> list[str]:
        return param_names_for(model, "mlp_down", range(0, max(self.resolve_layers(model)) + 1))

    # ------------------------------------------------------------------ SAE and features
    def fit_activations(self, target: dict[int, torch.Tensor],
                        benign: dict[int, torch.Tensor]) -> dict[int, dict]:
        """Train one SAE per layer on target + benign activations ``{l: (N, d)}``, then pick features."""
        c = self.cfg
        self.saes, self.features, self.info = fit_layer_saes(target, benign, self.layers, c.n_latents,
                                                             c.sae_k,
                                                             c.sae_steps, c.sae_lr, c.seed, c.min_ratio,
                                                             c.top_k)
        return self.info

    def fit(self, model, tokenizer, target_texts: list[str] | None = None,
            benign_texts: list[str] | None = None,
            coherence_prompts: list[str] | None = None) -> dict[int, dict]:
        """Fit SAEs and features on the (still frozen) model from texts (default: the config's); see module
        doc."""
        target = list(target_texts if target_texts is not None else self.cfg.target_texts)
        benign = list(benign_texts if benign_texts is not None else self.cfg.benign_texts)
        coherence = list(coherence_prompts if coherence_prompts is not None else self.cfg.coherence_prompts)
        self.resolve_layers(model)
        if coherence:
            self.coherence = next(text_batches(tokenizer, coherence, len(coherence)), None)
            if self.coherence is None:
                raise DataError("CRISP: every coherence prompt is empty")
        if not target and not benign:
            return {}
        if not target or not benign:
            raise ConfigError("CRISP fitting needs both target and benign texts")
        return self.fit_activations(*(states_over_batches(model, text_batches(tokenizer, texts), self.layers)
                                      for texts in (target, benign)))

    def _fit_from_batch(self, batch: dict, ref) -> None:
        f, r = batch["forget"], batch["retain"]
        self.fit_activations(*({l: ref.hidden(b, l)[b["attention_mask"].bool()].float().cpu()
                                for l in self.layers}
                               for b in (f, r)))

    # ------------------------------------------------------------------ training
    def setup(self, model, ref, batch: dict) -> None:
        if self.layers is None:
            self.resolve_layers(model)
        # no texts were configured: fit on the step-0 batch while ref answers on any input
        if self.saes is None:
            self._fit_from_batch(batch, ref)
        if self.coherence is not None and ref.seals:  # after seal() ref has only the retain states
            ids, mask = self.coherence["input_ids"], self.coherence["attention_mask"]
            device, n = batch["forget"]["input_ids"].device, self.cfg.coherence_batch
            self.coherence_ref = torch.cat([ref.hidden({"input_ids": ids[s:s + n].to(device),
                                                        "attention_mask": mask[s:s + n].to(device)},
                                                        self.last).cpu()
                                            for s in range(0, ids.size(0), n)])

    def _coherence_batch(self, device) -> tuple[dict, list[int]]:
        n = self.coherence["input_ids"].size(0)
        idx = [(self._coh_pos + i) % n for i in range(min(self.cfg.coherence_batch, n))]
        self._coh_pos = (self._coh_pos + len(idx)) % n
        ids, mask = self.coherence["input_ids"][idx], self.coherence["attention_mask"][idx]
        keep = int(mask.sum(1).max())
        return {"input_ids": ids[:, :keep].to(device), "attention_mask": mask[:, :keep].to(device)}, idx

    def loss(self, model, batch, ref) -> dict:
        if self.layers is None:
            self.resolve_layers(model)
        f, r = batch["forget"], batch["retain"]
        device = f["input_ids"].device
        top = max(self.layers)
        hs_f = hidden_states_at(model, f["input_ids"], f["attention_mask"], self.layers, stop_after=top)
        hs_r = hidden_states_at(model, r["input_ids"], r["attention_mask"], self.layers, stop_after=top)
        unlearn, reg = [], []
        for l in self.layers:
            sae = self.saes[l].to(device)
            unlearn.append(unlearn_term(sae, hs_f[l], f["attention_mask"], self.features[l]))
            reg.append(reg_term(hs_r[l], ref.hidden(r, l, "retain"), r["attention_mask"]))
        last = self.last
        if self.coherence is None:
            c, c_ref = r, ref.hidden(r, last, "retain")
        else:
            c, idx = self._coherence_batch(device)
            c_ref = (self.coherence_ref[idx,
                                        :c["input_ids"].size(1)].to(device) if self.coherence_ref is not None
                     else ref.hidden(c, last))
        h_c = hidden_states_at(model, c["input_ids"], c["attention_mask"], [last])[last]
        coh = reg_term(h_c, c_ref, c["attention_mask"])
        return crisp_terms(torch.stack(unlearn).mean(), torch.stack(reg).mean(), coh, self.cfg.beta,
                           self.cfg.gamma)
