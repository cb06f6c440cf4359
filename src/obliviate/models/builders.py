"""Builders for small models: Llama-architecture models we pretrain ourselves, and tiny
random models of other architectures for tests.

All builders are deterministic in ``seed`` (they do not disturb the global RNG) and return
the model in eval mode, like ``from_pretrained``; training code calls ``model.train()``.

Default special-token ids (pad=0, bos=1, eos=2) match :func:`obliviate.models.tokenizer.train_tokenizer`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from obliviate.errors import ConfigError
from obliviate.models.tokenizer import train_tokenizer

SIZES: dict[str, dict[str, int]] = {
    # name: tiny_llama kwargs.                    non-embedding params (d_ff = 8/3 d, rounded up to 16)
    "nano": dict(n_layer=4, d_model=64, n_head=4),  # 0.20M
    "micro": dict(n_layer=5, d_model=96, n_head=4),  # 0.55M
    "tiny": dict(n_layer=8, d_model=128, n_head=4),  # 1.61M
    "small": dict(n_layer=9, d_model=192, n_head=6),  # 3.98M
}
"""Named sizes for :func:`build_model`, roughly geometric in non-embedding parameter count."""

ARCHS = ("llama", "gpt2", "gemma2", "qwen2", "mistral", "gptneox")
"""Architectures :func:`tiny_random` can build."""


def default_d_ff(d_model: int) -> int:
    """Llama's MLP width for a gated MLP: 8/3 of ``d_model`` (same params as a 4x plain MLP), rounded up to
    16."""
    return 16 * math.ceil(8 * d_model / 3 / 16)


def parse_size(size: str) -> tuple[int, int, int]:
    """``"<layers>x<width>"`` -> (n_layer, d_model, n_head) with heads of 16 dims (at least one head)."""
    try:
        layers, width = (int(x) for x in str(size).lower().split("x"))
    except ValueError:
        raise ConfigError(f"model size {size!r} is not of the form "
                          "'<layers>x<width>' (e.g. '2x32')") from None
    if layers < 1 or width < 2:
        raise ConfigError(f"model size {size!r}: needs >= 1 layer and width >= 2")
    n_head = max(1, width // 16)
    if width % n_head or (width // n_head) % 2:
        raise ConfigError(f"model size {size!r}: width {width} does "
                          f"not split into {n_head} heads of even size")
    return layers, width, n_head


def tiny_llama(
    vocab_size: int,
    n_layer: int = 4,
    d_model: int = 128,
    n_head: int = 4,
    d_ff: int | None = None,
    max_len: int = 256,
    tie_embeddings: bool = True,
    seed: int = 0,
    n_kv_head: int | None = None,
    pad_token_id: int | None = 0,
    bos_token_id: int | None = 1,
    eos_token_id: int | None = 2,
    attn_implementation: str = "sdpa",
):
    """A freshly initialised ``LlamaForCausalLM`` (RMSNorm, RoPE, SwiGLU MLP), deterministic in ``seed``.

    ``d_ff`` defaults to :func:`default_d_ff` (``d_model``); ``n_kv_head`` defaults to
    ``n_head`` (no grouped-query attention). ``tie_embeddings`` shares the input
    embedding and ``lm_head`` weights.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    for name, v in (("vocab_size", vocab_size), ("n_layer", n_layer), ("d_model", d_model),
                    ("n_head", n_head),
                    ("max_len", max_len)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"{name}={v!r} must be a positive integer")
    if d_model % n_head or (d_model // n_head) % 2:
        raise ConfigError(f"d_model={d_model} must split into n_head={n_head} heads of even size (RoPE)")
    n_kv_head = n_head if n_kv_head is None else n_kv_head
    if n_head % n_kv_head:
        raise ConfigError(f"n_head={n_head} is not a multiple of n_kv_head={n_kv_head}")
    _check_fits_in_memory(vocab_size, n_layer, d_model, n_head, n_kv_head,
                          default_d_ff(d_model) if d_ff is None else d_ff, tie_embeddings)
    for name, tid in (("pad_token_id", pad_token_id), ("bos_token_id", bos_token_id),
                      ("eos_token_id", eos_token_id)):
        if tid is not None and not 0 <= tid < vocab_size:
            raise ConfigError(f"{name}={tid} is outside the vocabulary (size {vocab_size})")
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=d_model,
        intermediate_size=default_d_ff(d_model) if d_ff is None else d_ff,
        num_hidden_layers=n_layer,
        num_attention_heads=n_head,
        num_key_value_heads=n_kv_head,
        max_position_embeddings=max_len,
        tie_word_embeddings=tie_embeddings,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
    )
    return _init(LlamaForCausalLM, config, seed, attn_implementation)


@dataclass
class TinyModelConfig:
    """A tiny Llama trained from scratch (:func:`build_tiny_model`): its shape, and the BPE vocabulary trained
    for it when it is given texts."""

    n_layer: int = 2
    d_model: int = 96
    n_head: int = 4
    d_ff: int | None = None
    """MLP width (None: :func:`default_d_ff`)."""
    max_len: int = 256
    vocab_size: int = 2048
    """BPE vocabulary trained on the texts (an upper bound: a small corpus may stop early); with a tokenizer
    given, its vocabulary is used, and with none, a vocabulary of this many ids."""

    def __post_init__(self):
        for key in ("n_layer", "d_model", "n_head", "max_len", "vocab_size"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"config key '{key}': must be a positive integer, got {v!r}")

    @classmethod
    def of_size(cls, size: str, **fields) -> "TinyModelConfig":
        """A named size of :data:`SIZES` (``"tiny"``) or ``"<layers>x<width>"`` (:func:`parse_size`), and
        ``fields``."""
        if size in SIZES:
            return cls(**{**SIZES[size], **fields})
        n_layer, d_model, n_head = parse_size(size)
        return cls(n_layer=n_layer, d_model=d_model, n_head=n_head, **fields)


def tiny_param_count(cfg: TinyModelConfig) -> int:
    """The parameters of :func:`build_tiny_model`'s model of ``cfg`` at its full vocabulary (an upper bound:
    a small corpus may train fewer ids), counted on the meta device without building a tokenizer."""
    with torch.device("meta"):
        model = tiny_llama(cfg.vocab_size, n_layer=cfg.n_layer, d_model=cfg.d_model, n_head=cfg.n_head, d_ff=cfg.d_ff,
                           max_len=cfg.max_len)
    return param_count(model, non_embedding=False)


def build_tiny_model(texts_or_tokenizer, cfg: TinyModelConfig, seed: int = 0):
    """``(model, tokenizer)``: a freshly initialised tiny Llama of ``cfg`` (:func:`tiny_llama`, deterministic
    in ``seed``, the global RNG untouched) over a tokenizer's vocabulary and special-token ids.

    ``texts_or_tokenizer``: texts (a BPE tokenizer of ``cfg.vocab_size`` is trained on them,
    :func:`~obliviate.models.tokenizer.train_tokenizer`), a tokenizer (used as it is), or None (no
    tokenizer: ``cfg.vocab_size`` ids, special ids pad/bos/eos 0/1/2, and None is returned for it).
    """
    tok = texts_or_tokenizer
    if tok is not None and not hasattr(tok, "pad_token_id"):
        if isinstance(tok, str) or not isinstance(tok, Iterable):
            raise ConfigError(f"build_tiny_model needs texts, a tokenizer or None, got {type(tok).__name__}")
        tok = train_tokenizer(tok, vocab_size=cfg.vocab_size)
    ids = ({} if tok is None else
           dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    model = tiny_llama(cfg.vocab_size if tok is None else len(tok), n_layer=cfg.n_layer, d_model=cfg.d_model,
                       n_head=cfg.n_head, d_ff=cfg.d_ff, max_len=cfg.max_len, seed=seed, **ids)
    return model, tok


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        return None


def _check_fits_in_memory(vocab_size: int, n_layer: int, d_model: int, n_head: int, n_kv_head: int, d_ff: int,
                          tie_embeddings: bool) -> None:
    """ConfigError, before anything is allocated, when the float32 weights of the model alone would not fit
    in this machine's memory (an absurd ``d_model`` used to end in torch's allocator error, or worse)."""
    head = d_model // n_head
    per_layer = (2 * d_model * n_head * head + 2 * d_model * n_kv_head * head + 3 * d_model * d_ff
                 + 2 * d_model)
    params = vocab_size * d_model * (1 if tie_embeddings else 2) + n_layer * per_layer + d_model
    memory = _memory_bytes()
    if memory and 4 * params > memory:
        raise ConfigError(f"a model with d_model={d_model}, n_layer={n_layer}, d_ff={d_ff}, "
                          f"vocab_size={vocab_size} has about {params:.3g} parameters: "
                          f"{4 * params / 2**30:.3g} GiB of float32 weights, more than this machine's "
                          f"{memory / 2**30:.3g} GiB of memory")


def build_model(size_or_kwargs: str | dict[str, Any], vocab_size: int, seed: int = 0, **overrides):
    """:func:`tiny_llama` for a named size in :data:`SIZES` or an explicit kwargs dict.

    ``overrides`` (e.g. ``max_len=512``, ``eos_token_id=...``) are applied on top.
    """
    if isinstance(size_or_kwargs, str):
        if size_or_kwargs not in SIZES:
            raise ConfigError(f"unknown model size {size_or_kwargs!r} (valid: {', '.join(SIZES)})")
        kwargs = dict(SIZES[size_or_kwargs])
    elif isinstance(size_or_kwargs, dict):
        kwargs = dict(size_or_kwargs)
    else:
        raise ConfigError("model size must be a name or a dict of "
                          f"tiny_llama arguments, got {size_or_kwargs!r}")
    kwargs.update(overrides)
    for key in ("vocab_size", "seed"):
        kwargs.pop(key, None)
    try:
        return tiny_llama(vocab_size, seed=seed, **kwargs)
    except TypeError as e:
        raise ConfigError(f"bad model arguments {sorted(kwargs)}: {e}") from e


def param_count(model: torch.nn.Module, non_embedding: bool = True) -> int:
    """Number of parameters (tied weights counted once).

    ``non_embedding=True`` leaves out every ``nn.Embedding`` (token and learned position
    embeddings) and the output embedding (``lm_head``), as in Kaplan et al. (2020).
    """
    seen: set[int] = set()
    if non_embedding:
        for mod in model.modules():
            if isinstance(mod, torch.nn.Embedding):
                seen.update(id(p) for p in mod.parameters())
        out = _output_embeddings(model)
        if out is not None:
            seen.update(id(p) for p in out.parameters())
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def tiny_random(arch: str, vocab_size: int = 128, seed: int = 0, tie_embeddings: bool | None = None, *,
                d_model: int = 32, n_layer: int = 3, n_head: int = 4, d_ff: int | None = None,
                max_len: int = 128,
                pad_token_id: int = 0, bos_token_id: int = 1, eos_token_id: int = 2):
    """A tiny randomly initialised causal LM of architecture ``arch`` (see :data:`ARCHS`), for tests.

    By default 3 decoder layers, ``d_model=32``, MLP width ``2 * d_model`` (so d_model != d_ff),
    4 heads, no dropout, eager attention, pad/bos/eos ids 0/1/2. ``tie_embeddings=None`` keeps the
    architecture's default (tied for gpt2 and gemma2, untied for the others).
    """
    import transformers as T

    if arch not in ARCHS:
        raise ConfigError(f"unknown architecture {arch!r} (valid: {', '.join(ARCHS)})")
    d, n_head = d_model, n_head
    d_ff = d_ff or 2 * d_model
    common: dict[str, Any] = dict(vocab_size=vocab_size, pad_token_id=pad_token_id, bos_token_id=bos_token_id,
                                  eos_token_id=eos_token_id)
    if tie_embeddings is not None:
        common["tie_word_embeddings"] = tie_embeddings
    llama_like = dict(
        hidden_size=d,
        intermediate_size=d_ff,
        num_hidden_layers=n_layer,
        num_attention_heads=n_head,
        num_key_value_heads=2,
        max_position_embeddings=max_len,
    )
    if arch == "llama":
        cls, config = T.LlamaForCausalLM, T.LlamaConfig(**llama_like, **common)
    elif arch == "mistral":
        cls, config = T.MistralForCausalLM, T.MistralConfig(**llama_like, **common)
    elif arch == "qwen2":
        cls, config = T.Qwen2ForCausalLM, T.Qwen2Config(**llama_like, **common)
    elif arch == "gemma2":
        cls, config = T.Gemma2ForCausalLM, T.Gemma2Config(**llama_like, head_dim=d // n_head, **common)
    elif arch == "gpt2":
        config = T.GPT2Config(
            n_embd=d, n_inner=d_ff, n_layer=n_layer, n_head=n_head, n_positions=max_len,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common,
        )
        cls = T.GPT2LMHeadModel
    else:  # gptneox
        config = T.GPTNeoXConfig(
            hidden_size=d, intermediate_size=d_ff, num_hidden_layers=n_layer, num_attention_heads=n_head,
            max_position_embeddings=max_len, hidden_dropout=0.0, attention_dropout=0.0, **common,
        )
        cls = T.GPTNeoXForCausalLM
    return _init(cls, config, seed, "eager")


def _init(cls, config, seed: int, attn_implementation: str):
    """Build ``cls(config)`` with weights drawn from ``seed``, leaving the global RNG untouched."""
    config._attn_implementation = attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config)
    return model.eval()


def _output_embeddings(model):
    get = getattr(model, "get_output_embeddings", None)
    return get() if get is not None else None
