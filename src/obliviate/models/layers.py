"""Model-agnostic access to decoder layers, MLPs, embeddings and hidden states.

The one place that knows where each architecture keeps its parts (no other module writes
``model.model.layers``). Supported architectures, what "hidden state of layer l" and "MLP
activations" mean here, and the weight orientation: docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import functools
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from obliviate.errors import ConfigError, DataError, ModelError

# Where each architecture keeps its decoder layers, tried in order on the unwrapped model.
_LAYER_PATHS = (
    ("model", "layers"),  # Llama, Mistral, Qwen2, Gemma, Gemma-2, Phi-3, OLMo
    ("transformer", "h"),  # GPT-2, GPT-J, Falcon
    ("gpt_neox", "layers"),  # GPT-NeoX, Pythia
    ("model", "decoder", "layers"),  # OPT
    ("model", "language_model", "layers"),  # multimodal wrappers (Gemma-3, Llava-style)
)
_MLP_ATTRS = ("mlp", "feed_forward", "ffn")
_ATTN_ATTRS = ("self_attn", "attn", "attention", "self_attention")
_DOWN_ATTRS = ("down_proj", "c_proj", "dense_4h_to_h", "fc2", "w2", "fc_out")
_UP_ATTRS = ("up_proj", "c_fc", "dense_h_to_4h", "fc1", "w1", "fc_in")
_GATE_ATTRS = ("gate_proj", "w3")
_Q_ATTRS, _K_ATTRS, _V_ATTRS = ("q_proj",), ("k_proj",), ("v_proj",)
_O_ATTRS = ("o_proj", "out_proj", "c_proj", "dense")
_QKV_ATTRS = ("c_attn", "qkv_proj", "Wqkv")  # one projection, its outputs [q; k; v] (not interleaved per head)

WHATS = ("mlp_down", "mlp_up", "mlp_gate", "mlp", "attn", "layer")
"""Valid ``what`` values for :func:`param_names_for`."""


class _StopForward(Exception):
    """Raised by a forward hook to end a forward pass early; never escapes this module."""


# --------------------------------------------------------------------------- structure


def unwrap(model: nn.Module) -> nn.Module:
    """The underlying Hugging Face model, through peft / DDP / torch.compile wrappers."""
    for _ in range(10):
        is_peft = hasattr(model, "peft_config")  # note: HF models with adapters added in place also have it
        if is_peft and hasattr(model, "get_base_model"):  # PeftModel
            model = model.get_base_model()
        elif is_peft and isinstance(getattr(model, "model", None), nn.Module) and not _is_hf_model(model):
            model = model.model  # a peft tuner (LoraModel ...), i.e. PeftModel.base_model
        elif hasattr(model, "_orig_mod"):  # torch.compile
            model = model._orig_mod
        elif isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        else:
            return model
    return model


def is_fsdp(model: nn.Module) -> bool:
    """True for a module sharded by torch FSDP2 (``fully_shard``)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _is_hf_model(model: nn.Module) -> bool:
    from transformers import PreTrainedModel

    return isinstance(model, PreTrainedModel)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder layers (blocks), in order."""
    base = unwrap(model)
    for path in _LAYER_PATHS:
        obj = base
        for attr in path:
            obj = getattr(obj, attr, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList):
            return obj
    n = getattr(getattr(base, "config", None), "num_hidden_layers", None)
    if n is not None:
        found = [m for m in base.modules() if isinstance(m, nn.ModuleList) and len(m) == n]
        if len(found) == 1:
            return found[0]
    raise ModelError(f"cannot find the decoder layers of a {type(base).__name__} (unsupported architecture)")


def num_layers(model: nn.Module) -> int:
    """Number of decoder layers."""
    return len(decoder_layers(model))


def check_layer(model: nn.Module, l: int) -> int:
    """Return ``l`` if it is a valid decoder-layer index (0-based, no negatives), else raise ModelError."""
    n = num_layers(model)
    if isinstance(l, bool) or not isinstance(l, int) or not 0 <= l < n:
        raise ModelError(f"layer {l!r} out of range for a {n}-layer model (valid: 0..{n - 1})")
    return l


def _check_layers(model: nn.Module, layers: Sequence[int]) -> list[int]:
    if isinstance(layers, int):
        layers = [layers]
    layers = [check_layer(model, l) for l in layers]
    if not layers:
        raise ConfigError("no layers given (need at least one layer index)")
    return layers


def _child(parent: nn.Module, names: Sequence[str], what: str, l: int) -> nn.Module:
    for name in names:
        mod = getattr(parent, name, None)
        if isinstance(mod, nn.Module):
            return mod
    raise ModelError(f"layer {l} ({type(parent).__name__}) has no {what} (looked for {', '.join(names)})")


def layer(model: nn.Module, l: int) -> nn.Module:
    """Decoder layer ``l``."""
    return decoder_layers(model)[check_layer(model, l)]


def mlp(model: nn.Module, l: int) -> nn.Module:
    """The MLP (feed-forward) block of decoder layer ``l``."""
    return _child(layer(model, l), _MLP_ATTRS, "MLP", l)


def attention(model: nn.Module, l: int) -> nn.Module:
    """The self-attention block of decoder layer ``l``."""
    return _child(layer(model, l), _ATTN_ATTRS, "attention block", l)


def mlp_down_proj(model: nn.Module, l: int) -> nn.Module:
    """The MLP's output projection d_ff -> d_model of layer ``l``.

    ``nn.Linear`` for Llama/Mistral/Qwen2/Gemma-2 (``down_proj``) and GPT-NeoX
    (``dense_4h_to_h``); ``transformers.Conv1D`` for GPT-2 (``c_proj``), whose weight is
    stored transposed, ``(d_ff, d_model)``: use :func:`down_proj_weight_out_in` for a fixed
    orientation. Under peft this is the LoRA wrapper (its ``.weight`` is the base weight).
    """
    return _child(mlp(model, l), _DOWN_ATTRS, "MLP down-projection", l)


def mlp_up_proj(model: nn.Module, l: int) -> nn.Module:
    """The MLP's input projection d_model -> d_ff of layer ``l`` (``up_proj`` / ``c_fc`` / ``dense_h_to_4h``).

    For gated MLPs this is the non-gated branch; see :func:`mlp_gate_proj`. GPT-2's is a ``Conv1D``.
    """
    return _child(mlp(model, l), _UP_ATTRS, "MLP up-projection", l)


def mlp_gate_proj(model: nn.Module, l: int) -> nn.Module:
    """The gate projection of a gated (SwiGLU/GeGLU) MLP; ModelError for ungated MLPs (GPT-2, NeoX)."""
    return _child(mlp(model, l), _GATE_ATTRS, "MLP gate projection (ungated MLP)", l)


def _is_conv1d(mod: nn.Module) -> bool:
    while hasattr(mod, "base_layer"):  # peft wrappers
        mod = mod.base_layer
    return type(mod).__name__ == "Conv1D"


def _weight_out_in(mod: nn.Module) -> torch.Tensor:
    w = mod.weight
    return w.t() if _is_conv1d(mod) else w


def down_proj_weight_out_in(model: nn.Module, l: int) -> torch.Tensor:
    """Layer ``l``'s down-projection weight as ``(d_model, d_ff)`` for every architecture (a view)."""
    return _weight_out_in(mlp_down_proj(model, l))


def up_proj_weight_out_in(model: nn.Module, l: int) -> torch.Tensor:
    """Layer ``l``'s up-projection weight as ``(d_ff, d_model)`` for every architecture (a view)."""
    return _weight_out_in(mlp_up_proj(model, l))


def d_model(model: nn.Module) -> int:
    """Width of the residual stream."""
    return input_embeddings(model).weight.shape[1]


def d_ff(model: nn.Module, l: int = 0) -> int:
    """Width of the MLP hidden layer at layer ``l``."""
    return down_proj_weight_out_in(model, l).shape[1]


def attention_heads(model: nn.Module) -> tuple[int, int, int]:
    """``(n_heads, n_kv_heads, head_dim)`` of the model's attention, from its config (``n_kv_heads`` <
    ``n_heads`` under grouped-query attention: query heads ``j*g .. (j+1)*g - 1`` share key/value head ``j``,
    ``g = n_heads // n_kv_heads``)."""
    cfg = getattr(unwrap(model), "config", None)
    n = getattr(cfg, "num_attention_heads", None)
    if not n:
        raise ModelError(f"the config of a {type(unwrap(model)).__name__} names no num_attention_heads")
    kv = getattr(cfg, "num_key_value_heads", None) or n
    hd = getattr(cfg, "head_dim", None) or d_model(model) // n
    if n % kv:
        raise ModelError(f"{n} attention heads do not split into {kv} key/value groups")
    return int(n), int(kv), int(hd)


def attention_projections(model: nn.Module, l: int) -> dict[str, nn.Module]:
    """The projections of layer ``l``'s attention: ``{"q", "k", "v", "o"}`` where each is its own module
    (Llama, Mistral, Qwen2, Gemma, OPT, GPT-J), or ``{"qkv", "o"}`` where one module computes ``[q; k; v]``
    (GPT-2's ``c_attn``, a ``Conv1D``; Phi-3's ``qkv_proj``). ModelError for a fused projection whose
    outputs interleave the heads (GPT-NeoX's ``query_key_value``), whose parts this does not locate. Use
    :func:`out_dims_mask` / :func:`in_dims_mask` for a fixed orientation."""
    attn = attention(model, l)
    o = _child(attn, _O_ATTRS, "attention output projection", l)
    for name in _QKV_ATTRS:
        if isinstance(getattr(attn, name, None), nn.Module):
            return {"qkv": getattr(attn, name), "o": o}
    try:
        return {"q": _child(attn, _Q_ATTRS, "query projection", l), "k": _child(attn, _K_ATTRS, "key projection", l),
                "v": _child(attn, _V_ATTRS, "value projection", l), "o": o}
    except ModelError:
        raise ModelError(f"layer {l}'s attention ({type(attn).__name__}) has neither separate q/k/v projections "
                         f"nor one [q; k; v] projection ({', '.join(_QKV_ATTRS)})") from None


def out_dims_mask(mod: nn.Module, dims: torch.Tensor) -> dict[str, torch.Tensor]:
    """Boolean masks, shaped as ``mod``'s ``weight`` (and ``bias``), of the entries that compute output
    dimensions ``dims`` of the linear map ``mod`` (rows of an ``nn.Linear``, columns of a ``Conv1D``)."""
    w = mod.weight
    out = {"weight": torch.zeros(w.shape, dtype=torch.bool, device=w.device)}
    if _is_conv1d(mod):
        out["weight"][:, dims] = True
    else:
        out["weight"][dims] = True
    if isinstance(getattr(mod, "bias", None), torch.Tensor):
        out["bias"] = torch.zeros(mod.bias.shape, dtype=torch.bool, device=w.device)
        out["bias"][dims] = True
    return out


def in_dims_mask(mod: nn.Module, dims: torch.Tensor) -> dict[str, torch.Tensor]:
    """Boolean mask, shaped as ``mod``'s ``weight``, of the entries that read input dimensions ``dims`` of
    the linear map ``mod`` (its bias reads no input: not included)."""
    w = mod.weight
    mask = torch.zeros(w.shape, dtype=torch.bool, device=w.device)
    if _is_conv1d(mod):
        mask[dims] = True
    else:
        mask[:, dims] = True
    return {"weight": mask}


def mlp_gate_or_none(model: nn.Module, l: int) -> nn.Module | None:
    """Layer ``l``'s MLP gate projection, None for an ungated MLP."""
    return next((getattr(mlp(model, l), n) for n in _GATE_ATTRS
                 if isinstance(getattr(mlp(model, l), n, None), nn.Module)), None)


# --------------------------------------------------------------------------- parameters


def param_names_for(model: nn.Module, what: str, layers: Sequence[int]) -> list[str]:
    """Names (as in ``model.named_parameters()``) of the parameters of ``what`` in ``layers``.

    ``what``: ``"mlp_down"`` / ``"mlp_up"`` / ``"mlp_gate"`` -> that projection's weight and
    bias (if any); ``"mlp"`` / ``"attn"`` / ``"layer"`` -> every parameter of the MLP, the
    attention block or the whole decoder layer (including any LoRA parameters inside).
    Names are those of the model passed in, so they carry peft prefixes when wrapped
    (e.g. ``base_model.model.model.layers.3.mlp.down_proj.base_layer.weight``).
    Example: "train only the down-projections of layers l-2..l" is
    ``param_names_for(model, "mlp_down", range(l - 2, l + 1))``.
    """
    getters = {
        "mlp_down": mlp_down_proj, "mlp_up": mlp_up_proj, "mlp_gate": mlp_gate_proj,
        "mlp": mlp, "attn": attention, "layer": layer,
    }
    if what not in getters:
        raise ConfigError(f"unknown parameter group {what!r} (valid: {', '.join(WHATS)})")
    wanted: set[int] = set()
    for l in _check_layers(model, list(layers)):
        mod = getters[what](model, l)
        if what.startswith("mlp_"):
            params = [mod.weight, getattr(mod, "bias", None)]
        else:
            params = list(mod.parameters())
        wanted.update(id(p) for p in params if isinstance(p, torch.Tensor))
    return [name for name, p in model.named_parameters(remove_duplicate=True) if id(p) in wanted]


def param_names_matching(model: nn.Module, patterns: str | Sequence[str]) -> list[str]:
    """Parameter names of ``model`` matching any of the ``fnmatch`` ``patterns``; ConfigError if none
    match."""
    if isinstance(patterns, str):
        patterns = [patterns]
    names = [n for n, _ in model.named_parameters() if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if not names:
        raise ConfigError(f"no parameter name matches {list(patterns)!r}")
    return names


# --------------------------------------------------------------------------- embeddings


def input_embeddings(model: nn.Module) -> nn.Module:
    """The token embedding (``nn.Embedding``)."""
    return unwrap(model).get_input_embeddings()


def output_embeddings(model: nn.Module) -> nn.Module | None:
    """The unembedding / ``lm_head`` (``None`` for a model without one)."""
    return unwrap(model).get_output_embeddings()


def embeddings_tied(model: nn.Module) -> bool:
    """True if the input embedding and ``lm_head`` share one weight tensor (checked by storage, not
    config)."""
    out = output_embeddings(model)
    if out is None:
        return False
    w_in, w_out = input_embeddings(model).weight, out.weight
    return w_in is w_out or (w_in.data_ptr() == w_out.data_ptr() and w_in.shape == w_out.shape)


def logits_at(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              positions: torch.Tensor) -> torch.Tensor:
    """Logits only at the (B, T) boolean ``positions``: (N, V), N = positions.sum().

    Runs the decoder body and applies the unembedding to the selected final hidden states only, which saves
    the ``lm_head`` cost of every unselected position (for a tiny model with a 4k vocabulary that is a third
    of the step). Models whose logits are not a plain linear map of the last hidden state (Gemma-2's final
    soft-capping, no ``lm_head``, or not a transformers model) fall back to the full forward, so the result is
    always equal to ``model(...).logits[positions]``; so does a model sharded by FSDP2, whose root
    (embeddings, head) is gathered only by the whole model's forward.
    """
    m = unwrap(model)
    head = m.get_output_embeddings() if hasattr(m, "get_output_embeddings") else None
    body = getattr(m, "base_model", None)
    plain = (head is not None and body is not None and body is not m and not is_fsdp(m)
             and getattr(m.config, "final_logit_softcapping", None) is None
             and getattr(m.config, "logit_scale", None) is None)
    if not plain:
        return model(input_ids=input_ids, attention_mask=attention_mask).logits[positions]
    h = body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return head(h[positions])


# --------------------------------------------------------------------------- hidden states


def _first(output):
    return output[0] if isinstance(output, (tuple, list)) else output


@contextlib.contextmanager
def count_passes(*models: nn.Module) -> Iterator[dict[str, int]]:
    """Count the passes through ``models`` inside the block: ``{"forwards", "backwards", "forward_tokens",
    "backward_tokens"}`` (tokens: the rows times positions of each pass, padding included).

    A forward is a call that enters a model's first decoder layer (a truncated forward, as RMU's to its layer,
    counts as one); a backward is a gradient flowing back through a forward's decoder layers (counted once per
    forward and gradient computation, however many layers it reached: two gradients taken through one forward,
    as MUDMAN's unlearning and adversary gradients, are two backwards). The same module given twice is counted
    once; a copy made inside the block (a distillation teacher) is counted with its original. Hooks are removed
    on exit (a copy's go quiet)."""
    counts = {"forwards": 0, "backwards": 0, "forward_tokens": 0, "backward_tokens": 0}
    handles, seen = [], set()
    fired: dict[int, list[int]] = {}  # forward -> [gradients through it so far, then each layer's hook count]
    current = {"pass": 0, "tokens": 0, "on": True}

    def enter(module, args, kwargs):
        if not current["on"]:
            return
        h = args[0] if args else kwargs.get("hidden_states")
        counts["forwards"] += 1
        current["pass"] = counts["forwards"]
        current["tokens"] = int(h.shape[0] * h.shape[1]) if torch.is_tensor(h) and h.dim() >= 2 else 0
        counts["forward_tokens"] += current["tokens"]

    def leave(module, args, output):
        h = _first(output)
        if current["on"] and torch.is_tensor(h) and h.requires_grad:
            n, tokens = current["pass"], current["tokens"]
            seen_n = fired.setdefault(n, [0])
            seen_n.append(0)
            slot = len(seen_n) - 1

            def flowed(grad, n=n, tokens=tokens, slot=slot):
                # each gradient computation reaches a layer's hook once: the k-th time any layer's fires is the
                # k-th gradient through this forward
                seen_n = fired[n]
                seen_n[slot] += 1
                if seen_n[slot] > seen_n[0]:
                    seen_n[0] = seen_n[slot]
                    counts["backwards"] += 1
                    counts["backward_tokens"] += tokens

            h.register_hook(flowed)

    for m in models:
        if m is None or id(m) in seen:
            continue
        seen.add(id(m))
        layers = decoder_layers(m)
        handles.append(layers[0].register_forward_pre_hook(enter, with_kwargs=True))
        handles.extend(layer.register_forward_hook(leave) for layer in layers)
    try:
        yield counts
    finally:
        current["on"] = False
        for h in handles:
            h.remove()


class ResumablePasses:
    """State hooks for :func:`obliviate.train.loop.train` (:attr:`hooks`) that carry the ``counts`` of a
    :func:`count_passes` block over a resume: each checkpoint saves the counts so far, and a run resumed from it
    adds them back, so it records the passes of the whole run, not only those since its checkpoint.
    :attr:`restored` says whether a resume brought counts back (a checkpoint saved without them, by an older
    obliviate, brings none)."""

    def __init__(self, counts: dict[str, int]):
        self.counts = counts
        self.restored = False
        self.hooks = (self._get, self._put)

    def _get(self) -> dict:
        return {"passes": {k: int(v) for k, v in self.counts.items()}}

    def _put(self, saved: dict) -> None:
        for k, v in (saved.get("passes") or {}).items():
            if k in self.counts:
                self.counts[k] += int(v)
                self.restored = True

    def whole_run(self, resumed_from: int) -> bool:
        """Whether the counts are those of the whole run: it started at step 0, or its resume restored them."""
        return not resumed_from or self.restored


@contextlib.contextmanager
def capture_hidden(model: nn.Module, layers: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
    """Capture the output of decoder ``layers`` during forward passes inside the block.

    Yields a dict that each forward pass fills with ``{l: hidden (B, T, d_model)}``
    (a later pass overwrites an earlier one). Tensors are not detached, so they carry
    gradients. The captured last layer is pre-final-norm (see module docstring).
    Hooks are removed on exit, even on error.
    """
    layers = _check_layers(model, layers)
    stack = decoder_layers(model)
    captured: dict[int, torch.Tensor] = {}
    handles = []
    try:
        for l in layers:
            def hook(_mod, _args, output, l=l):
                captured[l] = _first(output)
            handles.append(stack[l].register_forward_hook(hook))
        yield captured
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def capture_mlp_activations(model: nn.Module, layers: Sequence[int]) -> Iterator[dict[int, torch.Tensor]]:
    """Like :func:`capture_hidden`, for MLP activations: ``{l: input of the down-projection (B, T,
    d_ff)}``."""
    layers = _check_layers(model, layers)
    captured: dict[int, torch.Tensor] = {}
    handles = []
    try:
        for l in layers:
            def pre_hook(_mod, args, kwargs, l=l):
                captured[l] = args[0] if args else next(iter(kwargs.values()))
            handles.append(mlp_down_proj(model, l).register_forward_pre_hook(pre_hook, with_kwargs=True))
        yield captured
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """``model`` in eval mode for the block; its training flag is restored after, on error too."""
    was = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was)


def evaluating(fn):
    """Decorator: ``fn(model, ...)`` runs with ``model`` (its first argument) in eval mode
    (:func:`eval_mode`)."""
    @functools.wraps(fn)
    def run(model, *args, **kwargs):
        with eval_mode(model):
            return fn(model, *args, **kwargs)
    return run


def last_token_index(attention_mask: torch.Tensor, input_ids: torch.Tensor | None = None,
                     skip_id: int | None = None) -> torch.Tensor:
    """Index (B,) of each row's last non-padding token (left or right padding).

    If ``skip_id`` is given (the eos id) and that token is ``skip_id``, the token before
    it is taken instead (when the row has one).
    """
    mask = attention_mask.bool()
    T = mask.size(1)
    pos = torch.arange(T, device=mask.device).expand_as(mask)
    last = torch.where(mask, pos, torch.full_like(pos, -1)).max(dim=1).values  # (B,)
    if (last < 0).any():
        raise DataError("a row of the batch has no tokens (attention mask all zero)")
    if skip_id is not None and input_ids is not None:
        first = torch.where(mask, pos, torch.full_like(pos, T)).min(dim=1).values
        at_last = input_ids.gather(1, last[:, None])[:, 0]
        last = torch.where((at_last == skip_id) & (last > first), last - 1, last)
    return last


def gather_last(h: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """h (B, T, d) at per-row positions ``index`` (B,) -> (B, d)."""
    return h[torch.arange(h.size(0), device=h.device), index.to(h.device)]


@torch.no_grad()
def states_over_batches(model: nn.Module, batches, layers: Sequence[int], *, at: str = "tokens",
                        mlp: bool = False) -> dict[int, torch.Tensor]:
    """Hidden states (``mlp``: MLP activations, the down-projection's input) of ``layers`` over ``batches``.

    ``batches``: an iterable of ``{"input_ids", "attention_mask"}`` (B, T). ``at="tokens"``: every
    non-padding token, ``{l: (N_tokens, d)}`` in order; ``at="last"``: each row's last non-padding
    token, ``{l: (N_rows, d)}``. Float32 on the CPU; the model in eval mode, the forward pass stopped
    after ``max(layers)`` (:func:`hidden_states_at`).
    """
    if at not in ("tokens", "last"):
        raise ConfigError(f"states_over_batches: at must be 'tokens' or 'last', got {at!r}")
    layers = list(layers)
    device = next(model.parameters()).device
    out: dict[int, list[torch.Tensor]] = {l: [] for l in layers}
    with eval_mode(model):
        for batch in batches:
            ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            with contextlib.ExitStack() as stack:
                acts = stack.enter_context(capture_mlp_activations(model, layers)) if mlp else None
                hs = hidden_states_at(model, ids, mask, layers, stop_after=max(layers))
            got = acts if mlp else hs
            for l in layers:
                h = got[l]
                out[l].append((h[mask.bool()] if at == "tokens" else gather_last(h, last_token_index(mask)))
                              .float().cpu())
    return {l: torch.cat(v) for l, v in out.items()}


class _Dropped(nn.Module):
    """What stands in a :func:`prefix_copy` for a decoder layer above its last one, and for the output
    head."""

    def __init__(self, last: int):
        super().__init__()
        self.last = last

    def forward(self, *args, **kwargs):
        raise ModelError(f"this frozen copy holds decoder layers 0..{self.last} only: read hidden states up "
                         f"to layer {self.last} (hidden_states_at with "
                         f"stop_after <= {self.last}), not its logits")


def prefix_copy(model: nn.Module, last: int) -> nn.Module:
    """A frozen deep copy of ``model`` (eval mode, no gradients) that holds the embeddings and decoder layers
    ``0..last`` only: the layers above and the output head are left out, each a placeholder that refuses to
    run. It gives :func:`hidden_states_at` of layers up to ``last`` exactly as ``model`` does, in ``(last + 1)
    / L`` of the decoder layers' memory (a method that reads only a layer's frozen hidden states, as RMU
    does)."""
    check_layer(model, last)
    stand_in = _Dropped(last)
    memo: dict = {id(m): stand_in for m in list(decoder_layers(model))[last + 1:]}
    head = output_embeddings(model)
    if head is not None:
        memo[id(head)] = stand_in
    frozen = copy.deepcopy(model, memo)
    frozen.eval()
    for p in frozen.parameters():
        p.requires_grad_(False)
    return frozen


def hidden_states_at(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    layers: Sequence[int] = (),
    stop_after: int | None = None,
    **forward_kwargs,
) -> dict[int, torch.Tensor]:
    """Hidden states ``{l: (B, T, d_model)}`` of ``layers``, running the model only up to layer
    ``stop_after``.

    ``stop_after`` defaults to ``max(layers)``; layers after it, the final norm and the
    ``lm_head`` are never computed (a forward hook on layer ``stop_after`` ends the pass).
    Gradients flow as in a normal forward (call under ``torch.no_grad()`` if not wanted).
    Values equal those of :func:`capture_hidden` on a full forward pass.
    """
    layers = _check_layers(model, layers)
    stop_after = max(layers) if stop_after is None else check_layer(model, stop_after)
    if stop_after < max(layers):
        raise ConfigError(f"stop_after={stop_after} is before requested layer {max(layers)}")
    forward_kwargs.setdefault("use_cache", False)
    with capture_hidden(model, layers) as captured:
        # Registered after the capture hooks, so on layer `stop_after` it runs after them.
        stop_handle = decoder_layers(model)[stop_after].register_forward_hook(_raise_stop)
        try:
            model(input_ids=input_ids, attention_mask=attention_mask, **forward_kwargs)
        except _StopForward:
            pass
        finally:
            stop_handle.remove()
    return dict(captured)


def _raise_stop(_mod, _args, _output):
    raise _StopForward


def final_norm(model: nn.Module) -> nn.Module | None:
    """The norm applied after the last decoder layer (``model.norm`` / ``transformer.ln_f`` /
    ``gpt_neox.final_layer_norm``)."""
    base = unwrap(model)
    for inner, name in (("model", "norm"), ("transformer", "ln_f"), ("gpt_neox", "final_layer_norm"),
                        ("model", "decoder.final_layer_norm")):
        mod = getattr(base, inner, None)
        for attr in name.split("."):
            mod = getattr(mod, attr, None) if mod is not None else None
        if isinstance(mod, nn.Module):
            return mod
    return None
