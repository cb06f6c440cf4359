"""A small TopK sparse autoencoder on a model's residual stream (Gao et al. 2024), trained with the one loop
on its MSE: ``z = TopK_k(ReLU((x - b_dec) @ W_enc + b_enc))``, ``x_hat = z @ W_dec + b_dec`` with unit-norm
decoder rows; and :func:`load_sae` for SAELens, sparsify and Gemma Scope files. The maths and why our own:
docs/methods.md, "Why our own SAE".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from obliviate.data import TokenDataset, collate
from obliviate.errors import ConfigError, DataError
from obliviate.models.layers import states_over_batches
from obliviate.train import StepSampler, TrainConfig, train


class TopKSAE(nn.Module):
    """TopK sparse autoencoder with ``d`` inputs and ``m`` latents, ``k`` active per row."""

    def __init__(self, d: int, m: int, k: int, seed: int = 0):
        super().__init__()
        if not (isinstance(k, int) and 1 <= k <= m):
            raise ConfigError(f"SAE k={k!r} must be an integer in 1..n_latents={m}")
        gen = torch.Generator().manual_seed(seed)
        w_dec = F.normalize(torch.randn(m, d, generator=gen), dim=1)
        self.W_dec = nn.Parameter(w_dec)  # (m, d)
        self.W_enc = nn.Parameter(w_dec.t().clone())  # (d, m), tied initialisation
        self.b_enc = nn.Parameter(torch.zeros(m))
        self.b_dec = nn.Parameter(torch.zeros(d))
        self.k = k

    @property
    def d(self) -> int:
        return self.W_enc.shape[0]

    @property
    def n_latents(self) -> int:
        return self.W_enc.shape[1]

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_dec) @ self.W_enc + self.b_enc  # (N, m)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Sparse codes (N, m): the k largest ReLU pre-activations of each row, zeros elsewhere."""
        pre = F.relu(self.pre_activations(x.to(self.W_enc.dtype)))
        vals, idx = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, vals)

    def decoder(self) -> torch.Tensor:
        """Decoder with unit-norm rows (m, d)."""
        return F.normalize(self.W_dec, dim=1)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.decoder() + self.b_dec  # (N, d)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.encode(x)
        return self.decode(z), z

    def loss(self, x: torch.Tensor) -> torch.Tensor:
        x_hat, _ = self(x)
        return (x_hat - x).pow(2).mean()

    @torch.no_grad()
    def encode_all(self, x: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
        """:meth:`encode` in chunks, without gradients."""
        if len(x) == 0:
            return torch.zeros(0, self.n_latents)
        dev = self.W_enc.device
        return torch.cat([self.encode(x[i:i + chunk].to(dev)).cpu() for i in range(0, len(x), chunk)])

    def save(self, path: str | Path) -> Path:
        """Write the weights (decoder rows normalised) and ``k`` to one safetensors file."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {"W_enc": self.W_enc, "b_enc": self.b_enc, "W_dec": self.decoder(), "b_dec": self.b_dec}
        save_file({n: t.detach().contiguous().cpu() for n, t in tensors.items()}, str(path),
                  metadata={"k": str(self.k)})
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TopKSAE":
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise DataError(f"SAE file {str(path)!r} does not exist")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {n: f.get_tensor(n) for n in f.keys()}
        missing = {"W_enc", "b_enc", "W_dec", "b_dec"} - set(tensors)
        if missing or "k" not in meta:
            raise DataError(f"{str(path)!r} is not an SAE file (missing {sorted(missing) or ['k']})")
        d, m = tensors["W_enc"].shape
        sae = cls(d, m, int(meta["k"]))
        with torch.no_grad():
            for n, t in tensors.items():
                getattr(sae, n).copy_(t)
        return sae.eval()


def train_sae(activations: torch.Tensor, n_latents: int, k: int, steps: int = 500, lr: float = 1e-3,
              seed: int = 0, batch_size: int = 256, out_dir: str | Path | None = None,
              progress: bool = False) -> tuple[TopKSAE, dict]:
    """Train a :class:`TopKSAE` on ``activations`` (N, d) with the one training loop.

    ``b_dec`` starts at the data mean. Returns the SAE (eval mode, decoder rows
    normalised in place) and a summary with the MSE before and after and the
    fraction of variance unexplained.
    """

    x = torch.as_tensor(activations).float()
    if x.ndim != 2 or len(x) == 0:
        raise DataError("SAE training needs a non-empty (N, d) "
                        f"activation matrix, got shape {tuple(x.shape)}")
    sae = TopKSAE(x.shape[1], n_latents, k, seed=seed)
    with torch.no_grad():
        sae.b_dec.copy_(x.mean(0))
    sampler = StepSampler(len(x), batch_size, seed)
    cfg = TrainConfig(steps=steps, lr=lr, schedule="constant", grad_clip=1.0, log_every=max(1, steps // 10),
                      progress=progress, desc="sae")

    def dev() -> torch.device:
        return sae.W_enc.device  # the loop may move the SAE (accelerate)

    def full_mse() -> float:
        with torch.no_grad():
            total = sum(float(sae.loss(x[i:i + 8192].to(dev()))) * len(x[i:i + 8192])
                        for i in range(0, len(x), 8192))
        return total / len(x)

    before = full_mse()
    train(sae, lambda model, batch, step: {"mse": model.loss(batch)}, lambda step: x[sampler(step)].to(dev()),
          cfg,
          out_dir)
    with torch.no_grad():
        sae.W_dec.copy_(sae.decoder())
    after = full_mse()
    var = float(x.var(0, unbiased=False).mean())
    return sae.eval(), {"mse_before": before, "mse_after": after, "fvu": after / max(var, 1e-12)}


@torch.no_grad()
def residual_activations(model: nn.Module, dataset: TokenDataset, layer: int, batch_size: int = 16,
                         pad_id: int = 0) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
    """Residual stream (output of decoder ``layer``) at every token of ``dataset``.

    Returns ``(acts (N_tokens, d) float32, labels)`` where the rows run through the
    sequences in order (sequence 0's tokens, then sequence 1's, ...; padding dropped)
    and ``labels[field]`` is ``dataset.labels[field]`` flattened the same way. The
    sequence lengths ``[len(s) for s in dataset.input_ids]`` split the rows back.
    Uses :func:`obliviate.models.layers.hidden_states_at` (``capture_hidden`` on a
    forward pass truncated after ``layer``).
    """
    if len(dataset) == 0:
        raise DataError("residual_activations: empty dataset")
    batches = (collate(dataset.input_ids[s:s + batch_size],
                       pad_id) for s in range(0, len(dataset), batch_size))
    acts = states_over_batches(model, batches, [layer])[layer]
    labels = {f: np.concatenate(arrs) for f, arrs in dataset.labels.items()}
    return acts, labels


# ----------------------------------------------------------------------------- SAEs trained elsewhere

ACTIVATIONS = ("relu", "topk", "jumprelu")


class PretrainedSAE(nn.Module):
    """A sparse autoencoder trained by another library, with the same interface as :class:`TopKSAE`
    (``encode``, ``encode_all``, ``decode``, ``n_latents``, ``d``) so the weak-label pipeline takes it.

    ``W_enc`` (d, m), ``b_enc`` (m), ``W_dec`` (m, d), ``b_dec`` (d); codes are, with
    ``pre = (x - b_dec if subtract_b_dec else x) @ W_enc + b_enc``: ``relu(pre)`` (SAELens "standard"),
    the ``k`` largest of ``relu(pre)`` (TopK: SAELens "topk", EleutherAI sparsify), or
    ``pre * (pre > threshold)`` (JumpReLU: SAELens "jumprelu", Gemma Scope). ``layer``: the decoder
    layer whose output it reads, when its files say so (SAELens ``blocks.L.hook_resid_post``,
    sparsify ``layers.L``); ``source``: the format it came from.
    """

    def __init__(self, W_enc, b_enc, W_dec, b_dec, *, activation: str = "relu", k: int | None = None,
                 threshold=None, subtract_b_dec: bool = True, layer: int | None = None, source: str = ""):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ConfigError(f"SAE activation {activation!r} is not supported (supported: "
                              f"{', '.join(ACTIVATIONS)})")
        d, m = W_enc.shape
        shapes = {"b_enc": (tuple(b_enc.shape), (m,)), "W_dec": (tuple(W_dec.shape), (m, d)),
                  "b_dec": (tuple(b_dec.shape), (d,))}
        if threshold is not None:
            shapes["threshold"] = (tuple(threshold.shape), (m,))
        bad = [f"{n} {got} (expected {want})" for n, (got, want) in shapes.items() if got != want]
        if bad:
            raise DataError(f"SAE weights from {source or 'files'} do not fit together: {', '.join(bad)}")
        if activation == "topk" and not (isinstance(k, int) and 1 <= k <= m):
            raise DataError(f"a TopK SAE needs k in 1..{m}, got {k!r}")
        if activation == "jumprelu" and threshold is None:
            raise DataError("a JumpReLU SAE needs its threshold tensor")
        self.W_enc, self.b_enc = nn.Parameter(W_enc.float()), nn.Parameter(b_enc.float())
        self.W_dec, self.b_dec = nn.Parameter(W_dec.float()), nn.Parameter(b_dec.float())
        self.register_buffer("threshold", None if threshold is None else threshold.float())
        self.activation, self.k, self.subtract_b_dec = activation, k, subtract_b_dec
        self.layer, self.source = layer, source
        self.requires_grad_(False)
        self.eval()

    d = TopKSAE.d
    n_latents = TopKSAE.n_latents
    encode_all = TopKSAE.encode_all

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        return ((x - self.b_dec) if self.subtract_b_dec else x) @ self.W_enc + self.b_enc

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.pre_activations(x.to(self.W_enc.dtype))
        if self.activation == "jumprelu":
            return pre * (pre > self.threshold)
        pre = F.relu(pre)
        if self.activation == "relu":
            return pre
        vals, idx = pre.topk(self.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, idx, vals)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z @ self.W_dec + self.b_dec


def _layer_from(name: str | None) -> int | None:
    import re

    m = re.search(r"(?:blocks|layers|layer)[._](\d+)", name or "")
    return int(m.group(1)) if m else None


def _read_cfg(path: Path) -> dict:
    import json

    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not a readable SAE config ({e})") from None
    if not isinstance(cfg, dict):
        raise DataError(f"{path}: an SAE config must be a JSON object")
    return cfg


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise DataError(f"{path}: not a readable safetensors file ({e})") from None


def load_sae(path: str | Path):
    """An SAE from disk, in whichever format it is (never unpickled: safetensors, JSON and ``.npz`` only):

    - obliviate's own file (``TopKSAE.save``): a ``.safetensors`` file with ``k`` in its metadata;
    - SAELens: a directory with ``cfg.json`` and ``sae_weights.safetensors`` (architectures
      ``standard``, ``topk``, ``jumprelu``; ``apply_b_dec_to_input``; the layer from ``hook_name``);
    - EleutherAI sparsify: a directory with ``cfg.json`` (``k``) and ``sae.safetensors``
      (``encoder.weight``, ``encoder.bias``, ``W_dec``, ``b_dec``; the layer from the directory name,
      e.g. ``layers.12``);
    - Gemma Scope's own release: a directory with ``params.npz`` (``W_enc``, ``b_enc``, ``W_dec``,
      ``b_dec``, ``threshold``; JumpReLU).
    """
    path = Path(path)
    if path.is_file():
        return TopKSAE.load(path)
    if not path.is_dir():
        raise DataError(f"SAE {str(path)!r} does not exist")
    if (path / "sae_weights.safetensors").is_file():
        cfg = _read_cfg(path / "cfg.json")
        t = _tensors(path / "sae_weights.safetensors")
        arch = cfg.get("architecture", "standard")
        kwargs = cfg.get("activation_fn_kwargs") or {}
        activation = {"standard": "relu", "topk": "topk", "jumprelu": "jumprelu"}.get(arch)
        if activation is None:
            raise DataError(f"{path}: SAELens architecture {arch!r} is "
                            "not supported (standard, topk, jumprelu)")
        if arch == "standard" and cfg.get("activation_fn_str", cfg.get("activation_fn", "relu")) == "topk":
            activation = "topk"
        missing = {"W_enc", "b_enc", "W_dec", "b_dec"} - set(t)
        if missing:
            raise DataError(f"{path / 'sae_weights.safetensors'}: missing {sorted(missing)}")
        return PretrainedSAE(t["W_enc"], t["b_enc"], t["W_dec"], t["b_dec"], activation=activation,
                             k=kwargs.get("k", cfg.get("k")), threshold=t.get("threshold"),
                             subtract_b_dec=bool(cfg.get("apply_b_dec_to_input", True)),
                             layer=_layer_from(cfg.get("hook_name")), source="SAELens")
    if (path / "sae.safetensors").is_file():
        cfg = _read_cfg(path / "cfg.json")
        t = _tensors(path / "sae.safetensors")
        missing = {"encoder.weight", "encoder.bias", "W_dec", "b_dec"} - set(t)
        if missing:
            raise DataError(f"{path / 'sae.safetensors'}: missing {sorted(missing)}")
        w_enc = t["encoder.weight"].t()  # nn.Linear keeps (m, d)
        w_dec = t["W_dec"]
        if w_dec.shape == w_enc.shape:  # stored (d, m): the transposed orientation
            w_dec = w_dec.t()
        return PretrainedSAE(w_enc, t["encoder.bias"], w_dec, t["b_dec"], activation="topk", k=cfg.get("k"),
                             layer=_layer_from(path.name), source="sparsify")
    if (path / "params.npz").is_file():
        import numpy as _np

        with _np.load(path / "params.npz", allow_pickle=False) as z:
            t = {k.lower(): torch.from_numpy(_np.asarray(z[k], dtype=_np.float32)) for k in z.files}
        missing = {"w_enc", "b_enc", "w_dec", "b_dec", "threshold"} - set(t)
        if missing:
            raise DataError(f"{path / 'params.npz'}: missing {sorted(missing)}")
        return PretrainedSAE(t["w_enc"], t["b_enc"], t["w_dec"], t["b_dec"], activation="jumprelu",
                             threshold=t["threshold"], subtract_b_dec=False, layer=_layer_from(str(path)),
                             source="Gemma Scope")
    raise DataError(f"{path}: no SAE found (expected obliviate's .safetensors file, SAELens cfg.json + "
                    "sae_weights.safetensors, sparsify cfg.json + "
                    "sae.safetensors, or Gemma Scope params.npz)")
