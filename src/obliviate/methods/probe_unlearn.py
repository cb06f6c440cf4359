"""Multi-layer probe-guided toxicity unlearning (Atil, Gupta, Passonneau 2026, "Model Unlearning
Objectives Vary for Distinct Language Functions"). Reconstruction from the paper's summary
(docs/methods.md).

For a set of decoder layers L (default: early, middle and late), logistic probes fitted on the frozen
model's last-token states, toxic vs neutral, give unit directions d_l = w_l / ||w_l||. Then

    L_forget = (1/|L|) sum_{l in L} mean_x <h_l(x)_last, d_l>^2        on toxic inputs x (forget batch)
    L_retain = alpha * mean_{b,t,j} (h_m(x_r; theta) - h_m(x_r; frozen))^2,  m = max L, on benign text

``probe_unlearn_single`` is the single-layer ablation: the same objective at one layer.

Details: docs/methods.md, "probe_unlearn" under "Method details".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from obliviate.config import check_ranges
from obliviate.errors import ConfigError, ObliviateError
from obliviate.losses import hidden_mse
from obliviate.unlearning.contract import Method, register, weighted_search
from obliviate.methods.rmu import hidden_at
from obliviate.models.layers import (check_layer, gather_last, hidden_states_at, last_token_index, num_layers,
                                     param_names_for, unwrap)
from obliviate.eval.probes import (default_probe_layers, fit_probe_directions, last_token_states,
                                   probe_forget_loss)

PAPER = "Atil, Gupta, Passonneau 2026, function-specific unlearning objectives (reconstruction)"
"""The source of ``probe_unlearn`` and ``probe_unlearn_single``."""


@dataclass
class ProbeUnlearnConfig:
    layers: list[int] | None = None
    """Probe layers L; None = early/middle/late (``default_probe_layers``)."""
    alpha: float = 10.0
    """Weight of the retain MSE (at layer max L)."""
    C: float = 1.0
    """Inverse L2 strength of the logistic probes."""
    toxic_texts: list[str] = field(default_factory=list)
    """Texts labelled toxic for fitting the probes (used by ``fit``)."""
    neutral_texts: list[str] = field(default_factory=list)
    """Texts labelled neutral for fitting the probes (used by ``fit``)."""
    skip_eos: bool = True
    """Take the token before a trailing eos as the "last token"."""
    mask_padding: bool = True
    seed: int = 0

    def __post_init__(self):
        if self.layers is not None and not self.layers:
            raise ConfigError("config key 'layers': needs at least one layer (or null for the default)")
        if self.alpha < 0:
            raise ConfigError(f"config key 'alpha': must be >= 0, got {self.alpha}")
        if self.C <= 0:
            raise ConfigError(f"config key 'C': must be > 0, got {self.C}")
        if bool(self.toxic_texts) != bool(self.neutral_texts):
            raise ConfigError("config keys 'toxic_texts' and 'neutral_texts': give both or neither")
        check_ranges(self, indices=("layers",))


@register("probe_unlearn", paper=PAPER,
          equation=("(1/|L|) Σ_l mean ⟨h_l(x)_last, d_l⟩² over toxic-probe directions d_l at ≥ 3 layers + α "
                    "· MSE to the frozen model"),
          trains="MLP down-projections up to the deepest probed layer",
          search=weighted_search("alpha"))
class ProbeUnlearn(Method):
    config_cls = ProbeUnlearnConfig
    needs_reference = True
    compare_needs = {"toxic_texts": "texts labelled toxic", "neutral_texts": "texts labelled neutral"}

    @property
    def multiprocess_unsupported(self) -> str | None:
        """Why it cannot run in several processes as configured (None once the probes are fitted)."""
        if self.directions is None:
            return ("without toxic_texts it fits its probes on the first training batch, of which each "
                    "process sees different rows; set toxic_texts so that they are fitted before training")
        return None

    def __init__(self, cfg: ProbeUnlearnConfig):
        super().__init__(cfg)
        self.layers: list[int] | None = None
        self.directions: dict[int, torch.Tensor] | None = None
        self.probe_info: dict[int, dict] = {}  # per layer: held-out and train accuracy of the probe
        self.eos_id: int | None = None

    # ------------------------------------------------------------------ layers
    def default_layers(self, n_layers: int) -> list[int]:
        return default_probe_layers(n_layers)

    def resolve_layers(self, model) -> list[int]:
        layers = self.cfg.layers if self.cfg.layers is not None else self.default_layers(num_layers(model))
        self.layers = sorted({check_layer(model, int(l)) for l in layers})
        return self.layers

    def trainable(self, model) -> list[str]:
        layers = self.resolve_layers(model)
        return param_names_for(model, "mlp_down", range(0, max(layers) + 1))

    def reference_depth(self) -> int | None:
        return max(self.layers)  # the frozen states of the probe layers, the deepest for the retain term

    def cached_hidden_layers(self) -> dict[str, tuple[int, ...]]:
        # the loss reads the frozen states of the retain examples at the deepest probe layer (probes fitted on
        # the first batch are fitted in setup, where the reference still answers on any input)
        return {"retain": (max(self.layers),)} if self.cfg.mask_padding else {}

    # ------------------------------------------------------------------ probes
    def _set_probes(self, states: dict[int, np.ndarray], y: list[int]) -> None:
        probes = fit_probe_directions(states, y, C=self.cfg.C, seed=self.cfg.seed)
        self.directions = {l: torch.as_tensor(p["direction"]) for l, p in probes.items()}
        self.probe_info = {l: {"accuracy": p["accuracy"], "train_accuracy": p["train_accuracy"]}
                           for l, p in probes.items()}

    def fit(self, model, tokenizer, toxic_texts: list[str] | None = None,
            neutral_texts: list[str] | None = None) -> dict[int, dict]:
        """Fit the probes on the (still frozen) model's last-token states; returns ``probe_info``.

        Texts default to the config's; with none anywhere nothing happens (the probes are
        then fitted on the first batches, see docs/methods.md, "probe_unlearn").
        """

        toxic = list(toxic_texts if toxic_texts is not None else self.cfg.toxic_texts)
        neutral = list(neutral_texts if neutral_texts is not None else self.cfg.neutral_texts)
        if not toxic and not neutral:
            return {}
        if not toxic or not neutral:
            raise ConfigError("probe fitting needs both toxic and neutral texts")
        self.resolve_layers(model)
        self.eos_id = tokenizer.eos_token_id
        states = last_token_states(model, tokenizer, toxic + neutral, self.layers)
        self._set_probes(states, [1] * len(toxic) + [0] * len(neutral))
        return self.probe_info

    def _fit_from_batches(self, batch: dict, ref) -> None:
        f, r = batch["forget"], batch["retain"]
        states = {}
        for l in self.layers:
            cols = []
            for part in (f, r):
                idx = self._last(part)
                cols.append(gather_last(ref.hidden(part, l), idx).float().cpu().numpy())
            states[l] = np.concatenate(cols)
        self._set_probes(states, [1] * f["input_ids"].size(0) + [0] * r["input_ids"].size(0))

    # ------------------------------------------------------------------ training
    def setup(self, model, ref, batch: dict) -> None:
        self.resolve_layers(model)
        if self.directions is None and self.cfg.toxic_texts:
            raise ConfigError("probe_unlearn: 'toxic_texts' are set but fit(model, "
                              "tokenizer) was not called before training")
        if self.eos_id is None:
            eos = getattr(getattr(unwrap(model), "config", None), "eos_token_id", None)
            self.eos_id = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
        if self.directions is None:  # no texts: the probes are fitted on the frozen states of the first batch
            self._fit_from_batches(batch, ref)

    def _last(self, batch: dict) -> torch.Tensor:
        skip = self.eos_id if self.cfg.skip_eos else None
        return last_token_index(batch["attention_mask"], batch["input_ids"], skip)

    def _mask(self, batch):
        return batch["attention_mask"] if self.cfg.mask_padding else None

    def loss(self, model, batch, ref) -> dict:
        if self.directions is None:
            raise ObliviateError("probe_unlearn: no probe directions; setup(model, "
                                 "ref, batch) fits them before the first step")
        f, r = batch["forget"], batch["retain"]
        top = max(self.layers)
        hs = hidden_states_at(model, f["input_ids"], f["attention_mask"], self.layers, stop_after=top)
        forget = probe_forget_loss(hs, self.directions, self._last(f))
        h_r = hidden_at(model, r, top)
        # masked MSE to the frozen states
        retain = hidden_mse(h_r, ref.hidden(r, top, "retain"), self._mask(r))
        return {"forget": forget, "retain": self.cfg.alpha * retain}
