"""Quantization attack: score a quantized copy of the model, where small unlearning updates round away.

Zhang et al. 2024: each linear weight of a copy is quantized and dequantized in place (``int8`` / ``int4`` per
output channel, ``*_g128`` per group of 128 columns, ``nf4``: QLoRA's NormalFloat, :data:`NF4_CODE`), or
loaded by bitsandbytes with ``backend="bitsandbytes"``. The schemes' details: docs/evaluation.md,
"Quantization".
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import dataclass, field

import torch
from torch import nn

from obliviate.attacks.attack import AttackRead, AttackRun, read_counts, register_attack
from obliviate.attacks.cost import Cost, counting
from obliviate.attacks.scoring import scoring_task
from obliviate.errors import ConfigError, ModelError
from obliviate.eval.suite import evaluate_task
from obliviate.models.layers import output_embeddings, unwrap
from obliviate.tasks.base import Task

NF4_CODE = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
            -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
            0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
            0.7229568362236023, 1.0)
"""The NF4 code values, as bitsandbytes ships them (``bitsandbytes.functional.get_4bit_type("nf4")``, the
table of ``create_normal_map``; QLoRA, Dettmers et al. 2023): quantiles of N(0, 1) with equal
mass per bin, scaled to [-1, 1], 8 values >= 0 and 7 < 0 so that 0 is exact."""

NF4_BLOCK = 64
"""bitsandbytes' default NF4 block size (QLoRA's)."""

SCHEMES = ("int8", "int4", "int8_g128", "int4_g128", "nf4")
DEFAULT_SCHEMES = ("int8", "int4", "int4_g128", "nf4")


def _groups(w: torch.Tensor, group: int | None) -> tuple[torch.Tensor, int]:
    """(out, in) -> (out, n_groups, group), zero-padded along the input dimension; the padding's width."""
    out_f, in_f = w.shape
    g = in_f if group is None else group
    pad = (-in_f) % g
    w = torch.nn.functional.pad(w, (0, pad)) if pad else w
    return w.reshape(out_f, -1, g), pad


def rtn_quantize(w: torch.Tensor, bits: int, group: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric round-to-nearest of a (out, in) weight: integer codes (out, n_groups, group) in
    [-(2^(b-1) - 1), 2^(b-1) - 1] and scales (out, n_groups, 1) = absmax / (2^(b-1) - 1) per output channel
    (``group=None``) or per ``group`` input columns. |w - q * scale| <= scale / 2 for every element."""
    if bits < 2:
        raise ConfigError(f"quantization bits: must be >= 2, got {bits}")
    qmax = 2 ** (bits - 1) - 1
    g, _ = _groups(w.float(), group)
    absmax = g.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(absmax > 0, absmax / qmax, torch.ones_like(absmax))
    q = torch.clamp(torch.round(g / scale), -qmax, qmax)
    return q.to(torch.int8), scale


def nf4_quantize(w: torch.Tensor, block: int = NF4_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """NF4 of a (out, in) weight: code indices (out, n_blocks, block) into :data:`NF4_CODE` and the absmax
    of each block (out, n_blocks, 1); each value becomes the code value nearest to ``w / absmax``."""
    g, _ = _groups(w.float(), block)
    absmax = g.abs().amax(dim=-1, keepdim=True)
    absmax = torch.where(absmax > 0, absmax, torch.ones_like(absmax))
    code = torch.tensor(NF4_CODE, dtype=torch.float32, device=w.device)
    idx = ((g / absmax)[..., None] - code).abs().argmin(dim=-1)
    return idx.to(torch.uint8), absmax


def fake_quantize(w: torch.Tensor, scheme: str) -> torch.Tensor:
    """``w`` (out, in) quantized with ``scheme`` and dequantized, in ``w``'s shape and dtype."""
    if scheme not in SCHEMES:
        raise ConfigError(f"unknown quantization scheme {scheme!r} (valid: {', '.join(SCHEMES)})")
    in_f = w.shape[1]
    if scheme == "nf4":
        idx, absmax = nf4_quantize(w)
        deq = torch.tensor(NF4_CODE, dtype=torch.float32, device=w.device)[idx.long()] * absmax
    else:
        bits = int(scheme[3])
        q, scale = rtn_quantize(w, bits, 128 if scheme.endswith("_g128") else None)
        deq = q.float() * scale
    return deq.reshape(w.shape[0], -1)[:, :in_f].to(w.dtype)


def quantizable(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The Linear / Conv1D modules whose weights quantization rounds (not the unembedding)."""
    head = output_embeddings(model)
    return [(n, m) for n, m in unwrap(model).named_modules()
            if (isinstance(m, nn.Linear) or type(m).__name__ == "Conv1D") and m is not head]


@torch.no_grad()
def quantized_copy(model: nn.Module, scheme: str) -> nn.Module:
    """A deep copy of ``model`` whose Linear weights are rounded by ``scheme`` (the module docstring); the
    model itself is not modified. GPT-2's ``Conv1D`` stores (in, out): it is rounded per output channel
    too."""
    q = copy.deepcopy(model)
    mods = quantizable(q)
    if not mods:
        raise ModelError(f"a {type(unwrap(model)).__name__} has no Linear layers to quantize")
    for _, m in mods:
        conv = type(m).__name__ == "Conv1D"
        w = m.weight.t() if conv else m.weight
        deq = fake_quantize(w, scheme)
        m.weight.copy_(deq.t() if conv else deq)
    return q.eval()


def bnb_quantized(model: nn.Module, scheme: str) -> nn.Module:
    """The model reloaded through bitsandbytes (``int8``: ``load_in_8bit``; ``nf4``: ``load_in_4bit`` NF4),
    on the model's CUDA device. Needs bitsandbytes and a GPU."""
    if scheme not in ("int8", "nf4"):
        raise ConfigError(f"bitsandbytes quantizes int8 and nf4 only, not {scheme!r}")
    dev = next(model.parameters()).device
    if dev.type != "cuda":
        raise ConfigError("quantize backend 'bitsandbytes' needs the model on a CUDA device")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as e:
        raise ConfigError("quantize backend 'bitsandbytes' needs the bitsandbytes package installed") from e
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    qc = (BitsAndBytesConfig(load_in_8bit=True) if scheme == "int8" else
          BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                             bnb_4bit_compute_dtype=torch.float32))
    with tempfile.TemporaryDirectory() as d:
        unwrap(model).save_pretrained(d)
        return AutoModelForCausalLM.from_pretrained(d, quantization_config=qc,
                                                    device_map={"": dev.index or 0}).eval()


def quantize_attack(model, tokenizer, task: Task, schemes=DEFAULT_SCHEMES, *, backend: str = "simulate",
                    batch_size: int = 32) -> dict:
    """The task's metrics on each quantized copy: ``quantize_<scheme>_<key>`` for every number of
    :func:`~obliviate.eval.suite.evaluate_task` (the role scores, ``quantize_<scheme>_<role>_score``, and each
    set's own metrics, which :mod:`obliviate.evidence.trust` reads); ``quantize_forget_score`` the highest
    forget score over the schemes (the attacker's best) and ``quantize_scheme`` which, with its counts
    (:func:`~obliviate.attacks.attack.read_counts`): ``quantize_items`` the best scheme's forget items,
    ``quantize_variants`` the schemes it is the maximum of (each scheme scores the same items);
    ``quantize_cost``. ``model`` is untouched."""
    if backend not in ("simulate", "bitsandbytes"):
        raise ConfigError(f"quantize backend: must be 'simulate' or 'bitsandbytes', got {backend!r}")
    bad = [x for x in schemes if x not in SCHEMES] or ([] if schemes else ["(none)"])
    if bad:
        raise ConfigError("config key 'quantize_schemes': unknown scheme "
                          f"{bad[0]!r} (valid: {', '.join(SCHEMES)})")
    out: dict = {}
    cost = Cost()
    best = None
    for scheme in schemes:
        q = bnb_quantized(model, scheme) if backend == "bitsandbytes" else quantized_copy(model, scheme)
        with counting(q, cost=cost):
            m = evaluate_task(q, tokenizer, task, batch_size=batch_size)
        del q
        # every number (the metric trust's reads)
        out.update({f"quantize_{scheme}_{k}": v for k, v in m.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
        f = m.get("forget_score")
        if f is not None and (best is None or f > out["quantize_forget_score"]):
            best, out["quantize_forget_score"] = scheme, f
    out["quantize_scheme"] = best
    if best is not None:
        scored = {x for x in schemes if out.get(f"quantize_{x}_forget_score") is not None}
        out.update(read_counts("quantize", out[f"quantize_{best}_forget_items"], len(scored)))
    out["quantize_cost"] = cost.as_dict()
    return out


@dataclass
class QuantizeConfig:
    schemes: list[str] = field(default_factory=lambda: ["int4", "nf4"])
    """Of ``int8``, ``int4``, ``int8_g128``, ``int4_g128``, ``nf4``."""
    backend: str = "simulate"
    """``simulate`` (every machine) or ``bitsandbytes`` (its real 8-bit / 4-bit load, a CUDA model: int8,
    nf4)."""


@register_attack("quantize", needs="a forget evaluation set (QA pairs or MCQs)",
                 applies=lambda task: bool(task.evals_by_role("forget", variants=False)),
                 config=QuantizeConfig,
                 reads=AttackRead("forget_score", "quantize_forget_score", chance="forget_chance",
                                  label="the best quantized copy's forget score"))
def quantize_run(r: AttackRun, cfg: QuantizeConfig) -> dict:
    """The task's scores on quantized copies (:func:`quantize_attack`): about one evaluation of the task per
    scheme."""
    return quantize_attack(r.model, r.tokenizer, scoring_task(r.task), cfg.schemes, backend=cfg.backend)
