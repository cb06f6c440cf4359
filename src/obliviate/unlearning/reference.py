"""The frozen reference a method compares the trained model with, held as cheaply as the method allows.

:func:`make_reference` picks per run the cheapest form that gives the same numbers (``cache``, ``hidden``,
``logits``, ``shared``, ``prefix`` or ``copy``: docs/methods.md, "The frozen reference").
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import weakref
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from obliviate.data import collate
from obliviate.errors import ObliviateError
from obliviate.losses import IGNORE_INDEX, labelled_logits
from obliviate.models.layers import eval_mode, evaluating, hidden_states_at, num_layers, prefix_copy, unwrap
from obliviate.train.distributed import to_device
from obliviate.unlearning.contract import Method
from obliviate.unlearning.objectives import sequence_logprob, token_logprobs
from obliviate.unlearning.paired import PairedData

TOKENS = "/tokens"
"""Suffix of a sub-set's per-token log-probabilities in :attr:`Reference.cache` ("forget/tokens")."""

LOGITS = "logits"
"""The "layer" of a :class:`HiddenCache` of output logits (one row per labelled position)."""

DEFAULT_MEMORY_GIB = 1.0
"""Frozen hidden states held in memory up to this size (GiB); a larger :class:`HiddenCache` goes to a file."""


class HiddenCache:
    """Frozen hidden states of fixed sequences: sub-set ``key`` ("retain"), layer ``l``, example ``i`` ->
    ``(T_i, d)``, the states of its real tokens (right padding and a causal mask: padding changes none of
    them).

    The rows of each ``(key, layer)`` are one ``(tokens, d)`` tensor in the model's dtype, in memory or, when
    the whole cache is larger than ``memory_bytes``, in a file of a temporary folder (removed with the cache).
    :meth:`batch` rebuilds a step's ``(B, T, d)`` states, zero at the padding the methods' masks leave out;
    :meth:`flat` puts a step's rows one after another (a cache of :data:`LOGITS` at labelled positions)."""

    def __init__(self, rows: dict[str, dict[int, tuple[int, int]]], layers: dict[str, tuple], d: int,
                 dtype: torch.dtype, memory_bytes: int):
        self.rows, self.layers, self.d, self.dtype = rows, layers, d, dtype
        sizes = {key: sum(n for _, n in r.values()) for key, r in rows.items()}
        itemsize = torch.empty((), dtype=dtype).element_size()
        self.nbytes = sum(sizes[k] * d * itemsize * len(layers[k]) for k in rows)
        self.where = "memory" if self.nbytes <= memory_bytes else "disk"
        self.folder: Path | None = None
        self.store: dict[tuple[str, int], torch.Tensor] = {}
        if self.where == "disk":
            self.folder = Path(tempfile.mkdtemp(prefix="obliviate-reference-"))
            weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        for key, ls in layers.items():
            for l in ls:
                n = sizes[key] * d
                if self.folder is None:
                    t = torch.empty(n, dtype=dtype)
                else:
                    f = self.folder / f"{key}-{l}.bin"
                    with open(f, "wb") as fh:
                        fh.truncate(n * itemsize)
                    t = torch.from_file(str(f), shared=True, size=n, dtype=dtype)
                self.store[key, l] = t.view(sizes[key], d)

    def holds(self, key: str | None, layer: int) -> bool:
        return key in self.layers and layer in self.layers[key]

    def put(self, key: str, layer: int, index: int, states: torch.Tensor) -> None:
        start, n = self.rows[key][index]
        self.store[key, layer][start:start + n] = states[:n].to(self.dtype)

    def _rows(self, key: str, batch: dict) -> list[tuple[int, int]]:
        rows = self.rows[key]
        missing = [i for i in batch["index"].tolist() if i not in rows]
        if missing:
            raise ObliviateError(f"the frozen {key} states of example {missing[0] + 1} were not cached (the "
                                 "cache holds the examples of the run's steps; "
                                 "a step past them needs cache_reference=false)")
        return [rows[i] for i in batch["index"].tolist()]

    def batch(self, key: str, layer: int, batch: dict) -> torch.Tensor:
        """The cached states of ``batch``'s rows (read by ``batch["index"]``): ``(B, T, d)`` on its device."""
        ids = batch["input_ids"]
        out = torch.zeros(ids.shape[0], ids.shape[1], self.d, dtype=self.dtype)
        store = self.store[key, layer]
        for b, (start, n) in enumerate(self._rows(key, batch)):
            out[b, :n] = store[start:start + n]
        return out.to(ids.device)

    def flat(self, key: str, layer, batch: dict) -> torch.Tensor:
        """The cached rows of ``batch``'s examples one after another, in batch order: ``(sum n_i, d)`` on its
        device."""
        store = self.store[key, layer]
        return torch.cat([store[start:start + n] for start,
                          n in self._rows(key, batch)]).to(batch["input_ids"].device)

    def describe(self) -> str:
        size = f"{self.nbytes / 2**20:.1f} MiB" if self.nbytes >= 2**20 else f"{self.nbytes / 2**10:.1f} KiB"
        if all(v == (LOGITS,) for v in self.layers.values()):
            return f"logits of {', '.join(self.layers)} answers ({self.where}, {size})"
        parts = ", ".join(f"{k} at layer{'s' if len(v) > 1 else ''} {', '.join(map(str, v))}"
                          for k, v in self.layers.items())
        return f"hidden states of {parts} ({self.where}, {size})"


class Reference:
    """The frozen reference (module docstring): a detached copy, a prefix of one, the same model with its LoRA
    adapters disabled, or no model at all: cached log-probabilities (``cache``), cached hidden states
    (``hidden``) or cached logits at labelled positions (``logits``).

    Methods whose reference term is the answer log-probability of fixed sequences (NPO on the forget set,
    IdkDPO on the forget and IdK answers) ask :meth:`answer_logprob`, and those that weight its tokens (the
    ATWU variants) ask :meth:`token_logprobs`; with a cache both are read by example index, so full
    fine-tuning holds no second model. Terms that need whole distributions at every position (the KL retain
    term) need :meth:`logits`, which only a whole live reference has; at the labelled positions only (UNDIAL's
    teacher), :meth:`labelled_logits`, from the cache where it holds them. :meth:`hidden` reads layer states,
    from the cache where it holds them.

    With a hidden or logit cache the reference reads the model itself, unchanged before step 0, until
    :meth:`seal` (what a method's ``setup`` needs of it on other inputs, such as RMU's norm of the first
    forget batch); after it, only the cache.
    """

    def __init__(self, model, shared: bool, cache: dict[str, torch.Tensor] | None = None,
                 upto: int | None = None,
                 hidden: HiddenCache | None = None, logits: HiddenCache | None = None,
                 why: str | None = None):
        self.shared = shared
        self.cache = cache
        self.hidden_cache = hidden
        self.logit_cache = logits
        self.why = why
        """Why a whole copy is held where the method could have had a cache (the logit cache's size)."""
        self.upto = None if cache is not None or shared or self.seals else upto
        if cache is not None:
            self.model = None
        elif shared or self.seals:
            self.model = model  # hidden, logits: the model itself, still the reference, until seal()
        elif upto is not None:  # a method that reads only hidden states up to layer `upto`
            self.model = prefix_copy(model, upto)
        else:
            self.model = copy.deepcopy(model).eval()
            for p in self.model.parameters():
                p.requires_grad_(False)

    def seal(self) -> None:
        """After the method's setup, before step 0: a reference of cached states or logits lets go of the
        model."""
        if self.seals:
            self.model = None

    @property
    def seals(self) -> bool:
        """Whether :meth:`seal` lets go of the model: a method's ``setup`` then computes what else it needs of
        it."""
        return self.hidden_cache is not None or self.logit_cache is not None

    @property
    def holds_copy(self) -> bool:
        """Whether a frozen copy of (part of) the model is held: what the performance goal is rid of."""
        return self.model is not None and not self.shared and not self.seals

    @property
    def kind(self) -> str:
        """What this reference holds: "cache" (log-probabilities, no model), "hidden states of ..." and / or
        "logits of ... answers" (:meth:`HiddenCache.describe`), "shared" (the model, adapters off), "prefix
        0..L of N layers" (:func:`~obliviate.models.layers.prefix_copy`) or "copy" (a whole frozen copy, with
        the reason where a cache was declined)."""
        if self.cache is not None:
            return "cache"
        if self.seals:
            return "; ".join(c.describe() for c in (self.hidden_cache, self.logit_cache) if c is not None)
        if self.shared:
            return "shared"
        if self.upto is not None:
            return f"prefix 0..{self.upto} of {num_layers(self.model)} layers"
        return f"copy ({self.why})" if self.why else "copy"

    def nbytes(self) -> int:
        """Bytes this reference holds in memory beside the trained model: a copy's parameters, the caches."""
        n = sum(v.numel() * v.element_size() for v in (self.cache or {}).values())
        n += sum(c.nbytes for c in (self.hidden_cache,
                                    self.logit_cache) if c is not None and c.where == "memory")
        if self.holds_copy:
            n += param_bytes(self.model)
        return n

    @contextmanager
    def _ctx(self):
        """A live reference forward: in eval mode (no dropout, though the shared model trains) and outside any
        autocast, in the weights' own precision, as :func:`reference_logprobs` computes the cache; with the
        LoRA adapters off when the reference is the model itself."""
        device = next(self.model.parameters()).device.type
        with eval_mode(self.model), torch.autocast(device_type=device, enabled=False), \
                (self.model.disable_adapter() if self.shared else nullcontext()):
            yield

    def _live(self, what: str):
        if self.model is None:
            held = "answer log-probabilities" if self.cache is not None else self.kind
            raise ObliviateError(f"the cached reference has only {held}, not {what} (a method that needs "
                                 "them must not declare cached_reference_keys or cached_hidden_layers)")

    def _whole(self, what: str):
        self._live(what)
        if self.upto is not None:
            raise ObliviateError(f"the frozen reference holds decoder layers 0..{self.upto} only, not {what} "
                                 "(a method that needs them must not declare reference_depth)")

    @torch.no_grad()
    def logits(self, batch: dict) -> torch.Tensor:
        self._whole("logits")
        with self._ctx():
            return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    @torch.no_grad()
    def answer_logprob(self, batch: dict, key: str) -> torch.Tensor:
        """log pi_ref(y|x) of each sequence of ``batch`` (sub-batch ``key`` of the step: "forget", "idk"):
        (B,)."""
        if self.cache is not None and key in self.cache:
            return self.cache[key][batch["index"].cpu()].to(batch["labels"].device)
        self._whole(f"answer log-probabilities of {key}")
        with self._ctx():
            return sequence_logprob(self.model, batch)

    @torch.no_grad()
    def token_logprobs(self, batch: dict, key: str) -> torch.Tensor:
        """log pi_ref(y_t|.) of each labelled target token of ``batch`` (sub-batch ``key``): (B, T-1), zero
        elsewhere, in the layout of :func:`~obliviate.losses.token_nll`."""
        if self.cache is not None and key + TOKENS in self.cache:
            rows = self.cache[key + TOKENS][batch["index"].cpu()]
            out = torch.zeros(rows.shape[0], batch["labels"].shape[1] - 1, dtype=rows.dtype)
            width = min(out.shape[1], rows.shape[1])  # right padding: a row's tokens come first
            out[:, :width] = rows[:, :width]
            return out.to(batch["labels"].device)
        self._whole(f"token log-probabilities of {key}")
        with self._ctx():
            return token_logprobs(self.model, batch)

    @torch.no_grad()
    def labelled_logits(self, batch: dict, key: str) -> torch.Tensor:
        """The frozen logits at the positions of ``batch`` (sub-batch ``key``) that predict a labelled
        token: (N, V), in the order of :func:`~obliviate.losses.labelled_logits` (row by row, position by
        position)."""
        if self.logit_cache is not None and self.logit_cache.holds(key, LOGITS):
            return self.logit_cache.flat(key, LOGITS, batch)
        self._whole(f"logits of {key}")
        with self._ctx():
            return labelled_logits(self.model, batch)[0]

    @torch.no_grad()
    def hidden(self, batch: dict, layer: int, key: str | None = None) -> torch.Tensor:
        """Layer ``layer``'s frozen output on ``batch`` (sub-batch ``key`` of the step): ``(B, T, d)``."""
        if self.hidden_cache is not None and self.hidden_cache.holds(key, layer):
            return self.hidden_cache.batch(key, layer, batch)
        self._live(f"layer {layer} states of {key or 'other'} inputs")
        if self.upto is not None and layer > self.upto:
            raise ObliviateError(f"the frozen reference holds decoder layers 0..{self.upto} only, not layer "
                                 f"{layer} (the method's reference_depth is too shallow)")
        with self._ctx():
            return hidden_states_at(self.model, batch["input_ids"], batch["attention_mask"], [layer],
                                    stop_after=layer)[layer]

    def state(self) -> dict:
        return {k: v.clone() for k, v in (self.cache or {}).items()}

    def load_state(self, state: dict) -> None:
        if self.cache is not None and state:
            self.cache = {k: v.clone() for k, v in state.items()}


def make_reference(method: Method, model, data: PairedData, *, lora: bool, cache: bool = True,
                   steps: int | None = None,
                   memory_bytes: int = int(DEFAULT_MEMORY_GIB * 2**30)) -> Reference | None:
    """The reference ``method`` needs (None if it needs none), built from ``model`` as it is now, before
    any step: cached log-probabilities where the method declares ``cached_reference_keys`` or
    ``cached_token_reference_keys`` and ``cache`` is on; else the model with its LoRA adapters off
    (``lora``); else cached hidden states where it declares ``cached_hidden_layers`` and / or cached logits
    where it declares ``cached_logit_keys`` (no larger than the whole copy) and ``cache`` is on (of the
    examples of steps ``0..steps-1``, all without ``steps``); else a frozen copy, of the decoder layers up
    to the method's ``reference_depth`` only where it declares one and ``cache`` is on
    (``cache_reference=false`` keeps a whole copy). Call :meth:`Reference.seal` after the method's setup
    (:func:`prepare_reference` does both)."""
    if not method.needs_reference:
        return None
    keys, tokens = tuple(method.cached_reference_keys()), tuple(method.cached_token_reference_keys())
    if (keys or tokens) and cache:
        return Reference(model, shared=False, cache={**reference_logprobs(model, data, keys),
                                                     **reference_token_logprobs(model, data, tokens)})
    if lora:
        return Reference(model, shared=True)
    layers = {k: tuple(sorted(set(v))) for k,
              v in method.cached_hidden_layers().items() if v} if cache else {}
    logit_keys, why = tuple(method.cached_logit_keys()) if cache else (), None
    if logit_keys:
        rows = {key: labelled_rows(data, key, steps_examples(data, key, steps)) for key in logit_keys}
        need = sum(n for r in rows.values() for _, n in r.values()) * vocab_size(model) * \
            next(model.parameters()).element_size()
        whole = param_bytes(model)
        if need > whole:
            logit_keys, why = (), (f"a logit cache would take {need / 2**30:.2f} GiB, the copy "
                                   f"{whole / 2**30:.2f} GiB")
    if layers or logit_keys:
        return Reference(model, shared=False,
                         hidden=reference_hidden_states(model, data, layers, steps,
                                                        memory_bytes) if layers else None,
                         logits=reference_logits(model, data, rows, memory_bytes) if logit_keys else None)
    return Reference(model, shared=False, upto=method.reference_depth() if cache else None, why=why)


def prepare_reference(method: Method, model, data: PairedData, first: dict, **kw) -> Reference | None:
    """:func:`make_reference`, then ``method.setup(model, ref, first)`` (``first``: the step-0 batch), then
    :meth:`Reference.seal`: what every caller that trains a method does before step 0."""
    ref = make_reference(method, model, data, **kw)
    method.setup(model, ref, first)
    if ref is not None:
        ref.seal()
    return ref


def checkpoint_hooks(method: Method, ref):
    """``(get, set)`` of the state a checkpoint keeps beside the weights: the method's scorer, if it has one,
    and a cached reference (so a resumed run reads the very values the first one computed). Cached hidden
    states are not kept: a resumed run computes them again from the model it starts from, the original."""
    parts = {}
    if method.scorer_state():  # {} (the default): no state beside the weights
        parts["method"] = (method.scorer_state, method.load_scorer_state)
    if isinstance(ref, Reference) and ref.cache is not None:
        parts["reference"] = (ref.state, ref.load_state)
    if not parts:
        return None
    if list(parts) == ["method"]:  # the layout checkpoints had before the reference cache
        return parts["method"]
    return (lambda: {k: get() for k, (get, _) in parts.items()},
            lambda state: [parts[k][1](v) for k, v in state.items() if k in parts])


def _batches(data: PairedData, key: str, indices: list[int], batch_size: int, device):
    """``(indices, batch)`` of ``indices`` of sub-set ``key``, in batches of similar length (little
    padding)."""
    ids, masks = data.sequences(key)
    order = sorted(indices, key=lambda i: len(ids[i]))
    for s in range(0, len(order), batch_size):
        part = order[s:s + batch_size]
        yield part, to_device(collate([ids[i] for i in part], data.pad, label_mask=[masks[i] for i in part]),
                              device)


def logprob_dtype(model) -> torch.dtype:
    """The dtype log-probabilities of ``model`` are computed in
    (:func:`~obliviate.losses.at_least_float32`)."""
    return torch.promote_types(next(model.parameters()).dtype, torch.float32)


@torch.no_grad()
@evaluating
def reference_token_logprobs(model, data: PairedData, keys, batch_size: int = 16) -> dict[str, torch.Tensor]:
    """Per-token answer log-probabilities of ``model`` (as it is now: the reference) on every example of
    ``data``'s sub-sets ``keys``: ``{key + TOKENS: (n, L)}`` on the CPU in the precision they are computed in
    (float32, float64 for a float64 model), L the longest sequence's length - 1, row i in the layout of
    :func:`~obliviate.losses.token_nll` (zero past its end and at unlabelled positions)."""
    device, dtype = next(model.parameters()).device, logprob_dtype(model)
    out = {}
    for key in keys:
        ids = data.sequences(key)[0]
        vals = torch.zeros(len(ids), max(len(s) for s in ids) - 1, dtype=dtype)
        for part, b in _batches(data, key, list(range(len(ids))), batch_size, device):
            tok = token_logprobs(model, b).cpu()
            vals[part, :tok.shape[1]] = tok
        out[key + TOKENS] = vals
    return out


@torch.no_grad()
@evaluating
def reference_logprobs(model, data: PairedData, keys, batch_size: int = 16) -> dict[str, torch.Tensor]:
    """Per-sequence answer log-probabilities of ``model`` (as it is now: the reference) on every example of
    ``data``'s sub-sets ``keys`` ("forget", "idk"), on the CPU in the precision they are computed in (float32,
    float64 for a float64 model), indexed as the batches index them."""
    device, dtype = next(model.parameters()).device, logprob_dtype(model)
    out = {}
    for key in keys:
        n = len(data.sequences(key)[0])
        vals = torch.zeros(n, dtype=dtype)
        for part, b in _batches(data, key, list(range(n)), batch_size, device):
            vals[part] = sequence_logprob(model, b).cpu()
        out[key] = vals
    return out


def steps_examples(data: PairedData, key: str, steps: int | None) -> list[int]:
    """The examples of sub-set ``key`` that steps ``0..steps-1`` draw (all of them without ``steps``)."""
    n = len(data.sequences(key)[0])
    if steps is None:
        return list(range(n))
    sampler = {"forget": data.f_sampler, "retain": data.r_sampler, "idk": data.f_sampler}[key]
    seen: set[int] = set()
    for s in range(steps):
        seen.update(int(i) for i in sampler(s))
        if len(seen) == n:
            break
    return sorted(seen)


@torch.no_grad()
def reference_hidden_states(model, data: PairedData, layers: dict[str, tuple[int, ...]], steps: int | None,
                            memory_bytes: int, batch_size: int = 16) -> HiddenCache:
    """The frozen states of ``model`` (as it is now: the reference) at ``layers[key]`` for the examples of
    each sub-set ``key`` that the run's ``steps`` draw, computed as a live reference computes them (eval mode,
    no autocast, the weights' own precision)."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    picked = {key: steps_examples(data, key, steps) for key in layers}
    rows: dict[str, dict[int, tuple[int, int]]] = {}
    for key, idx in picked.items():
        ids = data.sequences(key)[0]
        start, rows[key] = 0, {}
        for i in idx:
            rows[key][i] = (start, len(ids[i]))
            start += len(ids[i])
    cache = None
    with eval_mode(model), torch.autocast(device_type=device.type, enabled=False):
        for key, ls in layers.items():
            for part, b in _batches(data, key, picked[key], batch_size, device):
                hs = hidden_states_at(model, b["input_ids"], b["attention_mask"], list(ls),
                                      stop_after=max(ls))
                if cache is None:  # the width is known after the first forward
                    cache = HiddenCache(rows, layers, hs[ls[0]].shape[-1], dtype, memory_bytes)
                for l in ls:
                    h = hs[l].detach().cpu()
                    for row, i in enumerate(part):
                        cache.put(key, l, i, h[row])
    return cache


def labelled_rows(data: PairedData, key: str, indices: list[int]) -> dict[int, tuple[int, int]]:
    """``{example: (start, n)}``: where each of ``indices`` of sub-set ``key`` starts in a flat store of one
    row per position that predicts a labelled token, and how many it has (its label mask shifted by one, as
    batches have)."""
    ids, masks = data.sequences(key)
    rows, start = {}, 0
    for i in indices:
        b = collate([ids[i]], data.pad, label_mask=None if masks is None else [masks[i]])
        n = int((b["labels"][0, 1:] != IGNORE_INDEX).sum())
        rows[i], start = (start, n), start + n
    return rows


def vocab_size(model) -> int:
    return int(unwrap(model).get_output_embeddings().weight.shape[0])


def param_bytes(model) -> int:
    """The bytes of ``model``'s parameters: what a whole frozen copy of it holds."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


@torch.no_grad()
def reference_logits(model, data: PairedData, rows: dict[str, dict[int, tuple[int, int]]], memory_bytes: int,
                     batch_size: int = 16) -> HiddenCache:
    """The frozen logits of ``model`` (as it is now: the reference) at the labelled positions of the examples
    ``rows[key]`` (:func:`labelled_rows`) of each sub-set ``key``, in the model's dtype, computed as a live
    reference computes them (eval mode, no autocast)."""
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    cache = HiddenCache(rows, {key: (LOGITS,) for key in rows}, vocab_size(model), dtype, memory_bytes)
    with eval_mode(model), torch.autocast(device_type=device.type, enabled=False):
        for key, r in rows.items():
            for part, b in _batches(data, key, list(r), batch_size, device):
                logits, _, positions = labelled_logits(model, b)
                per_row = positions.sum(1).tolist()
                for i, chunk in zip(part, torch.split(logits.detach().cpu(), per_row)):
                    if len(chunk) != r[i][1]:
                        raise ObliviateError(f"the reference's {key} example {i + 1} has {len(chunk)} "
                                             f"labelled positions in a batch, {r[i][1]} alone")
                    cache.put(key, LOGITS, i, chunk)
    return cache
