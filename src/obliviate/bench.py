"""Benchmarks: cost of one unlearning step relative to a plain fine-tuning step.

For each registered training method, on the same model and the same paired
batch, measured in the same process:

- ``step_time_ratio``: median wall time of one optimizer step of the method
  divided by that of a plain fine-tuning step (LM loss on the forget batch,
  all parameters trained);
- ``peak_mem_ratio``: peak training memory of the step divided by the plain
  step's. On CUDA this is ``torch.cuda.max_memory_allocated``. On the CPU, where
  torch has no allocator statistics, it is the measured sum of the bytes that
  the step holds at its peak: parameters of the trained model, the frozen
  reference's parameters if it keeps a separate copy, gradients, AdamW state,
  and the activations autograd saved for the backward pass (counted with
  ``torch.autograd.graph.saved_tensors_hooks``).

LoRA variants (``<method>+lora``) show that the reference model of LoRA
training is the adapter-disabled model itself: no second copy.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from obliviate.losses import lm_loss
from obliviate.methods import METHODS, build_method, method_names
from obliviate.train import select_trainable
from obliviate.unlearn import IDK_ANSWERS, PairedQA, Reference, wrap_lora


@dataclass
class BenchConfig:
    seed: int = 0
    methods: list[str] = field(default_factory=list)
    """Methods to time (default: every registered training method)."""
    lora_methods: list[str] = field(default_factory=lambda: ["npo", "rmu"])
    size: str = "tiny"
    batch_size: int = 16
    repeats: int = 5
    warmup: int = 2


def _tensor_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


@contextmanager
def count_saved_activations(counter: dict):
    """Sum the bytes of tensors autograd saves for backward (distinct storages, parameters excluded)."""
    params = counter.setdefault("param_ptrs", set())
    seen = counter.setdefault("seen", set())

    def pack(t):
        st = t.untyped_storage()
        key = st.data_ptr()
        if key not in params and key not in seen:
            seen.add(key)
            counter["bytes"] = counter.get("bytes", 0) + st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield


def _one_step(model, loss_fn, optimizer) -> None:
    optimizer.zero_grad(set_to_none=True)
    terms = loss_fn()
    sum(terms.values()).backward()
    optimizer.step()


def measure(model, loss_fn, ref_model=None, repeats: int = 5, warmup: int = 2) -> dict:
    """Median step time and peak memory of ``loss_fn`` steps on ``model``'s trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6)
    cuda = next(model.parameters()).is_cuda
    for _ in range(warmup):
        _one_step(model, loss_fn, opt)
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        _one_step(model, loss_fn, opt)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        _one_step(model, loss_fn, opt)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        counter = {"param_ptrs": {p.untyped_storage().data_ptr() for p in model.parameters()}}
        opt.zero_grad(set_to_none=True)
        with count_saved_activations(counter):
            terms = loss_fn()
        total = sum(terms.values())
        total.backward()
        grads = [p.grad for p in params]
        state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        static = _tensor_bytes(list(model.parameters())) + _tensor_bytes(grads) + _tensor_bytes(state)
        ref_bytes = 0
        if ref_model is not None and ref_model is not model:
            ref_bytes = _tensor_bytes(list(ref_model.parameters()))
        peak = static + ref_bytes + counter.get("bytes", 0)
        opt.zero_grad(set_to_none=True)
    return {"step_seconds": statistics.median(times), "peak_bytes": int(peak)}


def _world_batch(cfg: BenchConfig):
    from obliviate.compare import forget_pairs, retain_pairs
    from obliviate.models.tokenizer import train_tokenizer
    from obliviate.world import WorldConfig, generate_world

    world = generate_world(WorldConfig(seed=cfg.seed))
    tok = train_tokenizer([d["text"] for d in world.documents()], vocab_size=2048)
    data = PairedQA(tok, forget_pairs(world), retain_pairs(world), cfg.batch_size, cfg.seed, idk=IDK_ANSWERS)
    return tok, data(0)


def run_bench(cfg: BenchConfig, progress: bool = True) -> dict:
    from tqdm.auto import tqdm

    from obliviate.models.builders import build_model

    torch.manual_seed(cfg.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok, batch = _world_batch(cfg)
    batch = {k: {kk: vv.to(dev) for kk, vv in v.items()} for k, v in batch.items()}

    def fresh():
        return build_model(cfg.size, vocab_size=len(tok), seed=cfg.seed).to(dev).train()

    base_model = fresh()
    select_trainable(base_model, ["*"])
    plain = measure(base_model, lambda: {"lm": lm_loss(base_model, batch["forget"])}, None, cfg.repeats, cfg.warmup)
    names = cfg.methods or [n for n in method_names() if getattr(METHODS[n], "kind", "train") == "train"]
    jobs = [(n, False) for n in names] + [(n, True) for n in cfg.lora_methods]
    metrics: dict = {"plain_finetune": {"step_seconds": plain["step_seconds"], "peak_bytes": plain["peak_bytes"]}}
    for name, lora in tqdm(jobs, desc="bench", disable=not progress):
        model = fresh()
        method = build_method(name)
        patterns = method.trainable(model)
        select_trainable(model, patterns)
        if lora:
            model = wrap_lora(model, patterns)
            select_trainable(model, ["*lora_*"])
        ref = Reference(model, shared=lora) if method.needs_reference else None
        if hasattr(method, "setup"):
            method.setup(model, ref, batch["forget"])
        r = measure(model, lambda: method.loss(model, batch, ref), ref.model if ref else None, cfg.repeats, cfg.warmup)
        key = f"{name}+lora" if lora else name
        metrics[key] = {
            "step_seconds": r["step_seconds"],
            "peak_bytes": r["peak_bytes"],
            "step_time_ratio": r["step_seconds"] / plain["step_seconds"],
            "peak_mem_ratio": r["peak_bytes"] / plain["peak_bytes"],
            "reference_copy": bool(ref is not None and not ref.shared),
        }
    metrics["device"] = str(dev)
    return metrics


def bench_table(metrics: dict) -> str:
    from obliviate.report import markdown_table

    rows = [{"method": k, **v} for k, v in metrics.items() if isinstance(v, dict) and "step_time_ratio" in v]
    for r in rows:
        r["peak_MiB"] = r["peak_bytes"] / 2**20
    return markdown_table(rows, ["method", "step_time_ratio", "peak_mem_ratio", "peak_MiB", "reference_copy"], "{:.2f}")
