"""GPU check (issues #18, #20): one unlearning step of every training method on the GPU in bf16, one NPO
step of the FSDP2 backend (fully_shard on a one-process group: NCCL on the GPU), then a short demo-sized run;
asserts that every tensor handed to a model is on that model's device, and writes the step times to
``OUT/gpu_check.json``. CI never has a GPU: run it when one is lent.

    .venv/bin/python scripts/gpu_check.py --out runs/gpu_check              # cuda, bfloat16, with the demo
    .venv/bin/python scripts/gpu_check.py --out /tmp/x --device cpu --dtype float32 --no-demo   # dry run
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import PreTrainedModel

from obliviate.pipelines.bench.run import prepare_method
from obliviate.unlearning.engine import IDK_ANSWERS, to_device
from obliviate.unlearning.paired import PairedData
from obliviate.methods import METHODS, method_names
from obliviate.models.builders import build_model
from obliviate.models.tokenizer import train_tokenizer
from obliviate.runs.results import atomic_write_json
from obliviate.tasks.world import WorldConfig, forget_pairs, generate_world, retain_pairs


def device_guard(model, seen: list) -> list:
    """Forward pre-hooks on ``model`` and the models inside it (its decoder body, which logits at labelled
    positions and truncated forwards call directly) that fail on any tensor argument not on its device."""
    def hook(module, args, kwargs):
        dev = next(module.parameters()).device
        for v in list(args) + list(kwargs.values()):
            if torch.is_tensor(v):
                assert v.device == dev, f"a {tuple(v.shape)} tensor on {v.device} handed to a model on {dev}"
                seen.append(str(v.device))
    inner = [m for m in model.modules() if isinstance(m, PreTrainedModel)] or [model]
    return [m.register_forward_pre_hook(hook, with_kwargs=True) for m in inner]


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def method_steps(dev: torch.device, dtype: torch.dtype, size: str, batch_size: int, seed: int = 0) -> dict:
    world = generate_world(WorldConfig(seed=seed))
    tok = train_tokenizer([d["text"] for d in world.documents()], vocab_size=2048)
    data = PairedData(tok, forget_pairs(world), retain_pairs(world), batch_size, seed, idk=IDK_ANSWERS)
    batch = to_device(data(0), dev)
    out = {}
    names = [n for n in method_names() if getattr(METHODS[n], "kind", "train") == "train"]
    for name, lora in [(n, False) for n in names] + [("npo", True), ("rmu", True)]:
        torch.manual_seed(seed)
        model = build_model(size, vocab_size=len(tok), seed=seed).to(dev, dtype).train()
        seen: list = []
        model, method, ref = prepare_method(name, model, data, batch, lora=lora)
        handles = device_guard(model, seen)
        if ref is not None and ref.model is not None and ref.model is not model:
            handles += device_guard(ref.model, seen)
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
        times = []
        for _ in range(3):  # the first step warms up kernels; the median of the others is reported
            sync(dev)
            t = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            terms = method.loss(model, batch, ref)
            loss = sum(terms.values())
            assert torch.isfinite(loss.float()), f"{name}: loss {loss.item()}"
            loss.backward()
            opt.step()
            sync(dev)
            times.append(time.perf_counter() - t)
        for h in handles:
            h.remove()
        assert seen and set(seen) == {str(next(model.parameters()).device)}, (name, set(seen))
        out[f"{name}+lora" if lora else name] = {"step_seconds": sorted(times[1:])[len(times[1:]) // 2],
                                                 "first_step_seconds": times[0], "model_calls": len(seen)}
        print(f"{name}{'+lora' if lora else ''}: {out[f'{name}+lora' if lora else name]['step_seconds'] * 1e3:.1f} ms",
              flush=True)
    return out


def fsdp2_step(dev: torch.device, dtype: torch.dtype, size: str, batch_size: int, seed: int = 0) -> dict:
    """One NPO step through :class:`obliviate.train.backend.FSDP2` on a one-process group (the launch check,
    which wants 2+ processes, is not on this path): the model is sharded (DTensors), the loss finite, and
    ``finish`` leaves the stepped weights in the plain model."""
    import contextlib
    import os
    from types import SimpleNamespace

    import torch.distributed as dist

    from obliviate.train.backend import FSDP2

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=0, world_size=1)
    world = generate_world(WorldConfig(seed=seed))
    tok = train_tokenizer([d["text"] for d in world.documents()], vocab_size=2048)
    data = PairedData(tok, forget_pairs(world), retain_pairs(world), batch_size, seed, idk=IDK_ANSWERS)
    batch = to_device(data(0), dev)
    torch.manual_seed(seed)
    model = build_model(size, vocab_size=len(tok), seed=seed).to(dev, dtype).train()
    model, method, ref = prepare_method("npo", model, data, batch, lora=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    acc = SimpleNamespace(num_processes=1, process_index=0, is_main_process=True, device=dev,
                          autocast=contextlib.nullcontext)
    backend = FSDP2(acc)
    work, opt, params = backend.prepare(model, None, lambda ps: torch.optim.AdamW(ps, lr=1e-4), lambda s: batch)
    assert all(hasattr(p, "to_local") for p in params), "FSDP2 left a parameter unsharded"
    sync(dev)
    t = time.perf_counter()
    loss = sum(method.loss(work, batch, ref).values())
    assert torch.isfinite(loss.float()), f"fsdp2 npo: loss {loss.item()}"
    backend.backward(loss, params)
    norm = backend.clip(params, 1.0)
    opt.step()
    sync(dev)
    seconds = time.perf_counter() - t
    backend.finish(model, work)
    moved = max(float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters())
    assert moved > 0, "the FSDP2 step did not reach the plain model"
    dist.destroy_process_group()
    print(f"fsdp2 npo: {seconds * 1e3:.1f} ms, grad norm {norm:.3g}", flush=True)
    return {"step_seconds": seconds, "grad_norm": norm, "max_weight_change": moved}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--size", default="tiny")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--no-demo", action="store_true", help="skip the demo-sized run")
    args = p.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device here (use --device cpu for a dry run)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "dtype": args.dtype,
           "torch": torch.__version__, "methods": method_steps(dev, getattr(torch, args.dtype), args.size,
                                                                args.batch_size)}
    res["fsdp2"] = fsdp2_step(dev, getattr(torch, args.dtype), args.size, args.batch_size)
    if not args.no_demo:  # the demo itself, on whatever device the loop picks (the GPU when there is one)
        from obliviate.cli.main import main as cli

        t = time.perf_counter()
        rc = cli(["demo", "--out", str(out / "demo"), "--seed", "0", "--no-progress"])
        res["demo"] = {"exit": rc, "seconds": time.perf_counter() - t}
    atomic_write_json(out / "gpu_check.json", res)
    print(f"gpu_check: {out / 'gpu_check.json'}")


if __name__ == "__main__":
    main()
