"""Benchmarks: cost of one unlearning step relative to a plain fine-tuning step.

For each registered training method, on the same model and paired batch in the same process:
``step_time_ratio`` (interleaved rounds, :func:`interleaved_ratios`), ``flop_bound`` and
``ratio_to_bound``, ``peak_mem_ratio``, LoRA variants, and the token-filtering classifier's throughput
against pretraining (:func:`measure_filtering`). Definitions and the last results: docs/bench.md.
"""

from __future__ import annotations

import datetime
import os
import platform
import random
import statistics
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from obliviate.data import encode_documents, pack_sequences, qa_prompt
from obliviate.errors import InvalidResult
from obliviate.eval.core import greedy_generate, mcq_accuracy
from obliviate.eval.lmeval import lmeval_generate, lmeval_mcq_choices
from obliviate.filtering import (FILTERED_MODELS, BiLM, ContextPooled, LogisticHead, TokenClassifier,
                                 TokenClassifierConfig)
from obliviate.losses import lm_loss
from obliviate.methods import METHODS, build_method, method_names
from obliviate.unlearning.engine import IDK_ANSWERS, wrap_lora
from obliviate.unlearning.paired import PairedData
from obliviate.unlearning.reference import prepare_reference
from obliviate.unlearning.objectives import answer_logprob, forward_logits, sequence_logprob
from obliviate.models.builders import TinyModelConfig, build_tiny_model, param_count
from obliviate.pipelines.bench.control_cache import control_cache_text, measure_control_cache
from obliviate.runs.report import markdown_table
from obliviate.runs.results import atomic_write_text, prepare_out_dir, write_results
from obliviate.tasks.world import WorldConfig, forget_pairs, full_answer_mcqs, generate_world, retain_pairs
from obliviate.train import TrainConfig, make_lm_batches, make_optimizer, select_trainable
from obliviate.train.pretrain import tokenizer_for


STEP_CONFIG = TrainConfig(lr=1e-6, beta1=0.9, beta2=0.999, weight_decay=0.01, progress=False, report_to=[])
"""The optimizer of the timed steps (:func:`obliviate.train.make_optimizer`): AdamW with torch's default betas
and weight decay and a learning rate small enough that the timed steps barely move the model."""


@dataclass
class BenchConfig:
    seed: int = 0
    methods: list[str] = field(default_factory=list)
    """Methods to time (default: every registered training method)."""
    lora_methods: list[str] = field(default_factory=lambda: ["npo", "rmu"])
    size: str = "tiny"
    mid_size: str | None = "8x512"
    """A second, larger model size (``"<layers>x<width>"``) timed the same way, to show how the step's share
    of the machine's peak (MFU) and the memory per method move with size; None: only ``size``."""
    mid_methods: list[str] | None = None
    """Methods timed at ``mid_size`` (default: the same as at ``size``)."""
    mid_rounds: int = 5
    """Interleaved rounds at ``mid_size`` (a fixed number: its steps are long)."""
    peak_gemm_n: int = 1024
    """Side of the square float32 matmul whose speed is the machine's peak (one thread, as the steps)."""
    batch_size: int = 16
    repeats: int = 5
    """Timed steps of the data-filtering throughput measurement."""
    warmup: int = 2
    min_rounds: int = 7
    """Interleaved rounds before the spread is checked (:func:`interleaved_ratios`)."""
    max_rounds: int = 60
    tolerance: float = 0.05
    """Rounds are added until every ratio's interquartile range is within +-tolerance of its median."""
    logit_memory: bool = True
    """Also measure the activation memory of full vs labelled-only logits on a 128k vocabulary
    (``metrics.logit_memory``, :func:`measure_logit_memory`)."""
    eval_speed: bool = True
    """Also measure evaluation throughput and MCQ scoring time against lm-eval (``metrics.eval_speed``)."""
    filtering: bool = True
    """Also time the data-filtering token classifier against pretraining (``metrics.filtering``)."""
    filtered_sizes: list[str] | None = None
    """Sizes (``"<layers>x<width>"``) of the filtered models; None: the token-filtering recipe's full
    sizes."""
    classifier_layers: int | None = None
    """biLM depth; None: the token-filtering recipe's default."""
    classifier_d: int | None = None
    """biLM width; None: the token-filtering recipe's default."""
    classifier_window: int | None = None
    """Context-pooling window of the token features; None: the token-filtering recipe's default."""
    classifier_batch_size: int = 64
    """Documents per classifier batch."""
    filter_target: float = 20.0
    """The throughput ratio the paper asks for (filtering under 1/20 = 5% of pretraining compute)."""
    steps: bool = True
    """Time each method's step against plain fine-tuning (the methods table, at ``size`` and ``mid_size``);
    false: only the parts below that are on (``steps=false eval_speed=false filtering=false
    logit_memory=false``: the controls' cache alone)."""
    control_cache: bool = True
    """Also time a verdict-bearing ``obliviate attack`` twice on one base with a fresh cache of the controls
    (``metrics.control_cache``: :func:`~obliviate.pipelines.bench.control_cache.measure_control_cache`, issue
    #56)."""
    rerun_size: str = "4x128"
    """The model size of that case (``"<layers>x<width>"``; 4x128 is about 1M parameters)."""


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
    """One bare optimizer step. Not :func:`obliviate.train.train`: the benchmark times the method's own
    forward, backward and update, and the loop's logging, clipping, schedule and checkpoint checks would
    be timed with it (the same for every method, so they would only pull each ratio towards 1)."""
    optimizer.zero_grad(set_to_none=True)
    terms = loss_fn()
    sum(terms.values()).backward()
    optimizer.step()


def measure(model, loss_fn, ref=None, repeats: int = 5, warmup: int = 2) -> dict:
    """Median step time and peak memory of ``loss_fn`` steps on ``model``'s trainable parameters; ``ref``: the
    method's :class:`~obliviate.unlearning.reference.Reference`, whose own memory (a frozen copy, the caches,
    :meth:`~obliviate.unlearning.reference.Reference.nbytes`) is counted on the CPU."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, STEP_CONFIG)
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
        peak = static + (ref.nbytes() if ref is not None else 0) + counter.get("bytes", 0)
        opt.zero_grad(set_to_none=True)
    return {"step_seconds": statistics.median(times), "peak_bytes": int(peak)}


def _world_model(cfg: BenchConfig, size: str | None = None):
    """The world, a fresh model of ``size`` (default ``cfg.size``) and the tokenizer trained for it on the
    world's documents."""
    world = generate_world(WorldConfig(seed=cfg.seed))
    model, tok = build_tiny_model([d["text"] for d in world.documents()],
                                  TinyModelConfig.of_size(size or cfg.size),
                                  seed=cfg.seed)
    return world, model, tok


def _world_batch(cfg: BenchConfig, size: str | None = None):
    world, _, tok = _world_model(cfg, size)
    data = PairedData(tok, forget_pairs(world), retain_pairs(world), cfg.batch_size, cfg.seed,
                      idk=IDK_ANSWERS)
    return tok, data


def prepare_method(name: str, model, data: PairedData, batch: dict, *, lora: bool = False,
                   cache: bool = True):
    """Method ``name`` set up on ``model`` for single steps on ``batch`` (a step of ``data``), as the executor
    sets it up: its parameters selected, LoRA adapters if ``lora``, its reference (``cache=False``: a whole
    live copy) and ``setup``. Returns ``(model, method, ref)`` (``model`` is the LoRA-wrapped one with
    ``lora``)."""
    method = build_method(name)
    patterns = method.trainable(model)
    select_trainable(model, patterns)
    if lora:
        model = wrap_lora(model, patterns)
        select_trainable(model, ["*lora_*"])
    # the bench repeats step 0
    ref = prepare_reference(method, model, data, batch, lora=lora, cache=cache, steps=1)
    return model, method, ref


def peak_matmul_flops(n: int = 1024, device=None, dtype=torch.float32, repeats: int = 5) -> dict:
    """The machine's peak in the run's dtype and threads: FLOP/s of an ``n x n`` by ``n x n`` matmul (``2
    n^3`` FLOPs), median of ``repeats`` (process CPU time on the CPU, synchronised wall clock on a GPU)."""
    device = torch.device(device or "cpu")
    gen = torch.Generator(device="cpu").manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(device=device, dtype=dtype) for _ in range(2))
    cuda = device.type == "cuda"
    clock = time.perf_counter if cuda else time.process_time
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t = clock()
        a @ b
        if cuda:
            torch.cuda.synchronize()
        times.append(clock() - t)
    return {"flops_per_s": 2 * n**3 / statistics.median(times), "n": n,
            "dtype": str(dtype).replace("torch.", ""),
            "threads": torch.get_num_threads()}


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def interleaved_ratios(steps: dict, baseline: str, *, clock=time.process_time, min_rounds: int = 7,
                       max_rounds: int = 60, tol: float = 0.05, seed: int = 0,
                       wall=time.perf_counter) -> dict:
    """Time ratios of ``steps`` (name -> callable running one step) to ``steps[baseline]``, interleaved.

    Each round calls every step once in a shuffled order (seeded) and records each one's time over the
    baseline's time in that round. After ``min_rounds``, rounds are added until every ratio's
    interquartile range is within ``+-tol`` of its median, or ``max_rounds``. Returns per name
    ``{"ratio", "q1", "q3", "wall_ratio", "rounds", "converged", "seconds"}`` (the baseline's ratio is 1;
    ``seconds``: the step's median time on ``clock``).
    """
    if baseline not in steps:
        raise ValueError(f"baseline {baseline!r} is not one of the steps")
    rng = random.Random(seed)
    names = list(steps)
    ratios: dict[str, list[float]] = {n: [] for n in names if n != baseline}
    walls: dict[str, list[float]] = {n: [] for n in ratios}

    def spread_ok() -> bool:
        for xs in ratios.values():
            q1, med, q3 = _quartiles(xs)
            if (q3 - q1) / 2 > tol * med:
                return False
        return True

    seconds: dict[str, list[float]] = {n: [] for n in names}
    rounds = 0
    while rounds < max_rounds:
        order = names[:]
        rng.shuffle(order)
        cpu, wl = {}, {}
        for n in order:
            c0, w0 = clock(), wall()
            steps[n]()
            cpu[n], wl[n] = clock() - c0, wall() - w0
        for n in names:
            seconds[n].append(cpu[n])
        for n in ratios:
            ratios[n].append(cpu[n] / cpu[baseline])
            walls[n].append(wl[n] / wl[baseline])
        rounds += 1
        if rounds >= min_rounds and spread_ok():
            break
    converged = spread_ok()
    out = {baseline: {"ratio": 1.0, "q1": 1.0, "q3": 1.0, "wall_ratio": 1.0, "rounds": rounds,
                      "converged": converged,
                      "seconds": statistics.median(seconds[baseline])}}
    for n, xs in ratios.items():
        q1, med, q3 = _quartiles(xs)
        out[n] = {"ratio": med, "q1": q1, "q3": q3, "wall_ratio": statistics.median(walls[n]),
                  "rounds": rounds,
                  "converged": converged, "seconds": statistics.median(seconds[n])}
    return out


def count_products(models, step) -> dict:
    """Multiply-accumulates of one call of ``step`` in the linear layers of ``models`` (the trained model and
    a live reference copy, if any), each ``rows x in x out``: ``forward``; ``backward``, the products the
    backward pass computes: the weight gradient where the weight is trained and the input gradient where the
    input needs one (so a frozen layer's backward costs one product, a trained one two, a layer before the
    first trained one nothing). The output projection counts only the rows it is applied to (logits at
    labelled positions), a truncated forward only the layers it runs; attention's own products are left out
    (short sequences)."""
    counts = {"forward": 0, "backward": 0}
    handles = []

    def macs(module, rows):
        return rows * module.in_features * module.out_features

    def fwd(module, args, output):
        counts["forward"] += macs(module, int(args[0].numel() // args[0].shape[-1]))

    def bwd(module, grad_input, grad_output):
        g = grad_output[0]
        if g is None:
            return
        rows = int(g.numel() // g.shape[-1])
        counts["backward"] += macs(module,
                                   rows) * (int(module.weight.requires_grad) + int(grad_input[0] is not None))

    seen = set()
    for m in models:
        if m is None:
            continue
        for mod in m.modules():
            if isinstance(mod, torch.nn.Linear) and id(mod) not in seen:
                seen.add(id(mod))
                handles.append(mod.register_forward_hook(fwd))
                handles.append(mod.register_full_backward_hook(bwd))
    try:
        # a frozen lower layer's hook fires on its output's gradient: as intended
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            step()
    finally:
        for h in handles:
            h.remove()
    return counts


def flop_bound(passes: dict, plain: dict) -> float:
    """The step's cost in plain fine-tuning steps, counting the products it computes
    (:func:`count_products`). For plain fine-tuning the backward computes two products per forward one:
    forward = 1/3, backward = 2/3."""
    return (passes["forward"] + passes["backward"]) / (plain["forward"] + plain["backward"])


def run_bench(cfg: BenchConfig, progress: bool = True, work: str | Path | None = None) -> dict:
    """Every part of the bench ``cfg`` turns on; ``work``: the folder of the controls' cache case (default: a
    temporary one)."""
    torch.manual_seed(cfg.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    names = cfg.methods or [n for n in method_names() if getattr(METHODS[n], "kind", "train") == "train"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the process CPU clock then measures the step itself
    try:
        peak = peak_matmul_flops(cfg.peak_gemm_n, dev)
        tok, data = _world_batch(cfg)
        metrics = {} if not cfg.steps else _time_methods(cfg, cfg.size, tok, data, names, cfg.lora_methods,
                                                         dev, peak,
                                                         cfg.min_rounds, cfg.max_rounds, progress)
        if cfg.mid_size and cfg.steps:
            if progress:
                print(f"bench: the same at size {cfg.mid_size}", flush=True)
            mid = _time_methods(cfg, cfg.mid_size, *_world_batch(cfg, cfg.mid_size), cfg.mid_methods or names,
                                [],
                                dev, peak, cfg.mid_rounds, cfg.mid_rounds, progress)
            metrics["mid"] = {"size": cfg.mid_size, **mid}
    finally:
        torch.set_num_threads(threads)
    metrics["device"] = str(dev)
    metrics["size"] = cfg.size
    metrics["peak"] = peak
    if cfg.logit_memory:
        metrics["logit_memory"] = measure_logit_memory(data(0)["forget"], seed=cfg.seed)
    if cfg.eval_speed:
        if progress:
            print("bench: evaluation throughput, QA generation and MCQ scoring against lm-eval", flush=True)
        metrics["eval_speed"] = measure_eval_speed(cfg)
    if cfg.filtering:
        if progress:
            print("bench: data-filtering classifier vs pretraining throughput", flush=True)
        metrics["filtering"] = measure_filtering(cfg)
    if cfg.control_cache:
        if progress:
            print("bench: a verdict-bearing attack twice on one base, "
                  "with a fresh cache of the controls", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            metrics["control_cache"] = measure_control_cache(Path(work or tmp), size=cfg.rerun_size,
                                                             seed=cfg.seed, progress=progress)
    return metrics


def _time_methods(cfg: BenchConfig, size: str, tok, data: PairedData, names: list[str],
                  lora_methods: list[str],
                  dev, peak: dict, min_rounds: int, max_rounds: int, progress: bool) -> dict:
    """Step-time ratios, FLOP bounds, MFU against ``peak`` and memory of ``names`` (and ``lora_methods`` with
    LoRA) at model ``size`` (``tok``, ``data``: :func:`_world_batch` at that size), each method beside a plain
    fine-tuning step on the same model size and batch."""
    batch = {k: {kk: vv.to(dev) for kk, vv in v.items()} for k, v in data(0).items()}

    def fresh():
        return build_tiny_model(tok, TinyModelConfig.of_size(size), seed=cfg.seed)[0].to(dev).train()

    base_model = fresh()
    select_trainable(base_model, ["*"])
    jobs = [(n, False) for n in names] + [(n, True) for n in lora_methods]
    runs = {"plain_finetune": (base_model, lambda: {"lm": lm_loss(base_model, batch["forget"])}, None)}
    for name, lora in tqdm(jobs, desc=f"bench: set-up ({size})", disable=not progress):
        model, method, ref = prepare_method(name, fresh(), data, batch, lora=lora)
        runs[f"{name}+lora" if lora else name] = (model,
                                                  (lambda m=model, meth=method,
                                                   r=ref: meth.loss(m, batch, r)),
                                                  ref)
    steps = {}
    for key, (model, loss_fn, ref) in runs.items():
        opt = make_optimizer([p for p in model.parameters() if p.requires_grad], STEP_CONFIG)
        steps[key] = (lambda m=model, f=loss_fn, o=opt: _one_step(m, f, o))
        for _ in range(cfg.warmup):
            steps[key]()
    passes = {key: count_products([runs[key][0], getattr(runs[key][2], "model", None)], steps[key])
              for key in tqdm(steps, desc=f"bench: passes ({size})", disable=not progress)}
    if progress:
        print(f"bench: interleaved rounds over {len(steps)} steps ({size})", flush=True)
    clock = time.process_time
    if dev.type == "cuda":  # a GPU step is timed on the wall clock, after the device has finished
        def clock():
            torch.cuda.synchronize()
            return time.perf_counter()
    timing = interleaved_ratios(steps, "plain_finetune", min_rounds=min_rounds, max_rounds=max_rounds,
                                tol=cfg.tolerance, seed=cfg.seed, clock=clock)
    metrics: dict = {}
    for key, (model, loss_fn, ref) in tqdm(runs.items(), desc="bench: memory "
                                                              f"({size})", disable=not progress):
        mem = measure(model, loss_fn, ref, repeats=1, warmup=0)
        t = timing[key]
        bound = flop_bound(passes[key], passes["plain_finetune"])
        flops = 2 * (passes[key]["forward"] + passes[key]["backward"]) / t["seconds"]
        metrics[key] = {"step_time_ratio": t["ratio"], "step_time_ratio_q1": t["q1"],
                        "step_time_ratio_q3": t["q3"],
                        "wall_time_ratio": t["wall_ratio"], "flop_bound": bound,
                        "ratio_to_bound": t["ratio"] / bound,
                        "step_seconds": t["seconds"], "flops_per_s": flops,
                        "mfu": flops / peak["flops_per_s"],
                        "peak_bytes": mem["peak_bytes"],
                        "reference_copy": bool(ref is not None and ref.holds_copy),
                        "reference": "none" if ref is None else ref.kind, "products": passes[key]}
        if key != "plain_finetune":
            metrics[key]["peak_mem_ratio"] = mem["peak_bytes"] / metrics["plain_finetune"]["peak_bytes"]
        if ref is not None and not ref.holds_copy and not ref.shared and "+lora" not in key:
            # the same step with the whole live copy the method held before: what its cache saves
            m2, meth2, ref2 = prepare_method(key, fresh(), data, batch, cache=False)
            whole = measure(m2, lambda: meth2.loss(m2, batch, ref2), ref2, repeats=1, warmup=0)["peak_bytes"]
            copy_bytes = ref2.nbytes()
            metrics[key].update(peak_bytes_whole_copy=whole, copy_share=copy_bytes / whole,
                                memory_saved_share=1 - mem["peak_bytes"] / whole)
            del m2, meth2, ref2
    metrics["timing"] = {"rounds": timing["plain_finetune"]["rounds"],
                         "converged": timing["plain_finetune"]["converged"], "tolerance": cfg.tolerance,
                         "clock": "wall clock, "
                                  "synchronised" if dev.type == "cuda" else "process CPU time, 1 thread",
                         "params": param_count(base_model, non_embedding=False)}
    return metrics


def measure_logit_memory(batch: dict, vocab: int = 128_256, d_model: int = 64, seed: int = 0) -> dict:
    """Activation memory of an answer log-probability with full B x T x V logits vs logits only at the
    labelled positions (:func:`obliviate.unlearning.objectives.sequence_logprob`), on a small-hidden model
    with a ``vocab``-token vocabulary (Llama 3's 128k by default) and ``batch`` (token ids folded into the
    vocabulary).

    Returns the bytes autograd saves for the backward pass in each case, their ratio, and the share of
    positions that carry a label (the ratio should come out near it: the logits dominate)."""
    model, _ = build_tiny_model(None, TinyModelConfig(n_layer=1, d_model=d_model, n_head=2, vocab_size=vocab),
                                seed)
    model.train()
    b = {k: v.cpu() for k, v in batch.items()}
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    out = {}
    for name, fn in (("full_logits", lambda: answer_logprob(forward_logits(model, b), b["labels"])),
                     ("labelled_logits", lambda: sequence_logprob(model, b))):
        counter = {"param_ptrs": set(params)}
        with count_saved_activations(counter):
            fn().sum().backward()
        model.zero_grad(set_to_none=True)
        out[f"{name}_bytes"] = int(counter.get("bytes", 0))
    labelled = (b["labels"][:, 1:] != -100).sum().item() / max(1, b["labels"][:, 1:].numel())
    out.update(vocab=vocab, labelled_share=labelled,
               memory_ratio=out["labelled_logits_bytes"] / out["full_logits_bytes"])
    return out


def measure_eval_speed(cfg: "BenchConfig", rounds: int = 3) -> dict:
    """Evaluation throughput on the tiny world model's tokenizer and a fresh tiny model, beside lm-eval's
    ``simple_evaluate`` on the same questions, model and prompts, interleaved round by round, process CPU
    time: QA greedy generation (batched, with the KV cache; :func:`greedy_generate` against a local
    ``generate_until`` task with the same stop and token budget) and lettered MCQ scoring (against a local
    ``multiple_choice`` task). lm-eval is timed twice: with its task set-up as a user gets it by default
    (``lm_eval_*``: the ``TaskManager`` indexes its installed tasks on every call) and with only the local
    task indexed (``lm_eval_*_local``: its evaluation alone); both must give the same outputs. lm-eval is a
    dev dependency; without it the comparisons are left out."""
    world, model, tok = _world_model(cfg)
    model.eval()
    mcqs = full_answer_mcqs(world, world.mcqs(split="forget"))
    facts = world.facts_by_split("forget")
    prompts = [qa_prompt(f["question"]) for f in facts]
    try:
        import lm_eval  # noqa: F401
        have_lm_eval = True
    except ImportError:
        have_lm_eval = False
    steps = {"qa": lambda: greedy_generate(model, tok, prompts, QA_TOKENS),
             "mcq": lambda: mcq_accuracy(model, tok, mcqs, style="letters")}
    if have_lm_eval:
        steps.update(lm_eval_qa=lambda: lmeval_generate(model, tok, prompts, QA_TOKENS),
                     lm_eval_mcq=lambda: lmeval_mcq_choices(model, tok, mcqs),
                     lm_eval_qa_local=lambda: lmeval_generate(model, tok, prompts, QA_TOKENS,
                                                              installed_tasks=False),
                     lm_eval_mcq_local=lambda: lmeval_mcq_choices(model, tok, mcqs, installed_tasks=False))
    times: dict[str, list[float]] = {k: [] for k in steps}
    outputs: dict = {}
    for _ in range(rounds):
        for name, fn in steps.items():
            t = time.process_time()
            outputs[name] = fn()
            times[name].append(time.process_time() - t)
    for k in ("qa", "mcq"):
        if f"lm_eval_{k}" in outputs and outputs[f"lm_eval_{k}"] != outputs[f"lm_eval_{k}_local"]:
            raise InvalidResult(f"lm-eval's {k} outputs differ with and without its installed tasks indexed")
    n = {"qa": len(prompts), "mcq": len(mcqs)}
    out = {"n_qa": n["qa"], "n_mcq": n["mcq"], "qa_new_tokens": QA_TOKENS}
    for k in ("qa", "mcq"):
        out[f"{k}_examples_per_s"] = n[k] / statistics.median(times[k])
        for suffix in ("", "_local"):
            theirs = f"lm_eval_{k}{suffix}"
            if theirs in times:
                out[f"{theirs}_examples_per_s"] = n[k] / statistics.median(times[theirs])
                out[f"{k}_time_vs_lm_eval{suffix}"] = statistics.median(a / b for a,
                                                                        b in zip(times[k], times[theirs]))
    return out


QA_TOKENS = 24
"""Greedy tokens per QA answer in the evaluation throughput (the QA metrics' default)."""


def filtering_ratio(classifier_tokens_per_s: float, train_tokens_per_s: float, target: float = 20.0) -> dict:
    """Classifier throughput as a multiple of pretraining throughput, and what it means.

    ``cost_fraction = 1 / ratio``: classifying each corpus token once costs that fraction of
    one pretraining pass over it (classifier tokens/s vs pretraining tokens/s, same machine).
    """
    if classifier_tokens_per_s <= 0 or train_tokens_per_s <= 0:
        raise ValueError("throughputs must be positive, got "
                         f"{classifier_tokens_per_s} and {train_tokens_per_s}")
    ratio = classifier_tokens_per_s / train_tokens_per_s
    return {"throughput_ratio": ratio, "cost_fraction": 1.0 / ratio, "meets_target": bool(ratio >= target)}


def _median_seconds(fn, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_filtering(cfg: BenchConfig) -> dict:
    """Token-classifier vs pretraining throughput on the world's documents (see the module docstring).

    The biLM and its logistic head are freshly initialised: throughput does not depend on
    the weights (the recipe reports the trained classifier's AUROC). Runs on the CPU (the
    biLM featurizer batches on the CPU), whatever device the method timings used.
    """
    clf_cfg, fm = TokenClassifierConfig(), FILTERED_MODELS
    sizes = cfg.filtered_sizes or list(fm.sizes)
    n_layer = cfg.classifier_layers or clf_cfg.layers
    d = cfg.classifier_d or clf_cfg.d_model
    world = generate_world(WorldConfig())
    tok = tokenizer_for(world, fm.vocab_size)
    docs = encode_documents(tok, world.documents(), max_len=fm.row_len)
    seqs = sorted(docs.input_ids, key=len)  # length-bucketed batches: little padding
    n_tokens = int(sum(len(s) for s in seqs))

    halves = [build_tiny_model(tok, TinyModelConfig.of_size(f"{n_layer}x{d}", max_len=fm.row_len),
                               seed=cfg.seed + i)[0]
              for i in range(2)]
    bilm = BiLM(halves[0], halves[1], layer=n_layer - 1, pad_id=tok.pad_token_id)
    window = clf_cfg.context_window if cfg.classifier_window is None else cfg.classifier_window
    feat = ContextPooled(bilm, window) if window else bilm
    clf = TokenClassifier(feat, special_ids=[tok.pad_token_id, tok.bos_token_id, tok.eos_token_id])
    gen = torch.Generator().manual_seed(cfg.seed)
    clf.head = LogisticHead(torch.zeros(feat.dim), torch.ones(feat.dim), torch.randn(feat.dim, generator=gen),
                            0.0)

    def classify():
        with torch.inference_mode():
            clf.predict_proba(seqs, batch_size=cfg.classifier_batch_size)

    clf_s = _median_seconds(classify, cfg.repeats, 1)
    clf_tps = n_tokens / clf_s
    packed = pack_sequences(docs, fm.row_len)
    batch = make_lm_batches(packed, fm.batch_size, cfg.seed, tok.pad_token_id)(0)
    step_tokens = int(batch["attention_mask"].sum())
    out = {"classifier": f"biLM {n_layer}x{d}" + (f" + window {window}" if window else ""),
           "classifier_tokens_per_s": clf_tps, "corpus_tokens": n_tokens, "vocab_size": len(tok),
           "threads": torch.get_num_threads(), "models": {}}
    for size in sizes:
        model, _ = build_tiny_model(tok, TinyModelConfig.of_size(size, max_len=fm.row_len), seed=cfg.seed)
        model.train()
        r = measure(model, lambda m=model: {"lm": lm_loss(m, batch)}, None, cfg.repeats, cfg.warmup)
        train_tps = step_tokens / r["step_seconds"]
        out["models"][size] = {"params": param_count(model, non_embedding=False),
                               "train_tokens_per_s": train_tps,
                               **filtering_ratio(clf_tps, train_tps, cfg.filter_target)}
    largest = out["models"][sizes[-1]]
    out.update({"filtered_model": sizes[-1], "throughput_ratio": largest["throughput_ratio"],
                "cost_fraction": largest["cost_fraction"], "meets_target": largest["meets_target"],
                "target": cfg.filter_target})
    return out


def filtering_table(metrics: dict) -> str:
    """Markdown section for ``metrics["filtering"]`` (empty string when absent)."""
    f = metrics.get("filtering")
    if not f:
        return ""
    rows = [{"filtered model": k, "params": v["params"], "pretrain tok/s": v["train_tokens_per_s"],
             "classifier tok/s": f["classifier_tokens_per_s"], "ratio": v["throughput_ratio"],
             "cost %": 100 * v["cost_fraction"]} for k, v in f["models"].items()]
    head = (f"Data-filtering classifier ({f['classifier']}, inference) vs pretraining step (forward + "
            f"backward + AdamW), vocabulary {f['vocab_size']}, {f['threads']} thread(s): ratio "
            f"{f['throughput_ratio']:.1f}x for the largest filtered model {f['filtered_model']} (target >= "
            f"{f['target']:g}x: {'met' if f['meets_target'] else 'not met'}).\n\n")
    return head + markdown_table(rows, list(rows[0]), "{:.1f}")


def bench_table(metrics: dict) -> str:
    """The methods table of ``metrics`` (one size: the top level, or ``metrics["mid"]``)."""
    rows = [{"method": k, **v} for k, v in metrics.items() if isinstance(v, dict) and "step_time_ratio" in v]
    for r in rows:
        r["peak_MiB"] = r["peak_bytes"] / 2**20
        r["whole_copy_MiB"] = r["peak_bytes_whole_copy"] / 2**20 if "peak_bytes_whole_copy" in r else None
        r["MFU_%"] = 100 * r["mfu"] if "mfu" in r else None
        r["GFLOP/s"] = r["flops_per_s"] / 1e9 if "flops_per_s" in r else None
        r["IQR"] = (f"{r['step_time_ratio_q1']:.2f}-{r['step_time_ratio_q3']:.2f}"
                    if "step_time_ratio_q1" in r else None)
    return markdown_table(rows,
                          ["method", "step_time_ratio", "IQR", "wall_time_ratio", "flop_bound",
                           "ratio_to_bound",
                                 "GFLOP/s", "MFU_%", "peak_mem_ratio", "peak_MiB", "whole_copy_MiB",
                                 "reference_copy",
                                 "reference"], "{:.2f}")


def roofline_text(metrics: dict) -> str:
    """The machine's peak, each size's MFU range and the methods that still hold a frozen copy, as
    Markdown."""
    p = metrics.get("peak")
    if not p:
        return ""
    lines = [f"Peak: {p['flops_per_s'] / 1e9:.1f} GFLOP/s ({p['n']}x{p['n']} {p['dtype']} matmul, "
             f"{p['threads']} thread(s)); MFU = a step's linear-layer FLOPs / its time / the peak."]
    for label, m in (("size", metrics), ("mid size", metrics.get("mid"))):
        if not m or "plain_finetune" not in m:
            continue
        keys = [k for k, v in m.items() if isinstance(v, dict) and "mfu" in v]
        mfus = [m[k]["mfu"] for k in keys]
        copies = [k for k in keys if m[k]["reference_copy"]]
        lines.append(f"- {label} {m.get('size', '')} ({m['timing'].get('params', 0) / 1e6:.2f}M parameters): "
                     f"plain fine-tuning MFU {100 * m['plain_finetune']['mfu']:.1f}%, methods "
                     f"{100 * min(mfus):.1f}-{100 * max(mfus):.1f}%; holding a frozen copy: "
                     f"{', '.join(copies) or 'none'}")
    e = metrics.get("eval_speed") or {}
    for k, what in (("qa", "QA generation"), ("mcq", "MCQ scoring")):
        if f"{k}_examples_per_s" in e:
            vs = (f" vs lm-eval {e[f'lm_eval_{k}_examples_per_s']:.1f}/s (time ratio "
                  f"{e[f'{k}_time_vs_lm_eval']:.3f})"
                  if f"lm_eval_{k}_examples_per_s" in e else "")
            if f"lm_eval_{k}_local_examples_per_s" in e:
                vs += (f", its evaluation alone {e[f'lm_eval_{k}_local_examples_per_s']:.1f}/s"
                       f" (time ratio {e[f'{k}_time_vs_lm_eval_local']:.3f})")
            lines.append(f"- {what}: {e[f'{k}_examples_per_s']:.1f} examples/s{vs}")
    return "\n".join(lines) + "\n"


def bench_report(cfg: BenchConfig, metrics: dict) -> tuple[str, str]:
    """``(head, table)`` of ``bench.md``: the machine and settings, then the roofline, the step-time table
    (and at the mid size), the filtering table and the controls' cache case."""
    table = roofline_text(metrics) + ("\n" + bench_table(metrics) if cfg.steps else "")
    if "mid" in metrics:
        table += (f"\nAt size `{metrics['mid']['size']}` "
                  f"({metrics['mid']['timing']['rounds']} interleaved rounds):\n\n")
        table += bench_table(metrics["mid"])
    filtering = filtering_table(metrics)
    if filtering:
        table += "\n" + filtering
    if "control_cache" in metrics:
        table += "\n" + control_cache_text(metrics)
    t = metrics.get("timing", {})
    head = (f"{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores "
            f"({platform.processor() or 'cpu'}), torch {torch.__version__}; device {metrics['device']}, "
            f"model size `{cfg.size}`, batch {cfg.batch_size}."
            + (f" Step-time ratios: median of {t.get('rounds')} interleaved rounds ({t.get('clock')}), IQR "
               "in brackets; converged (IQR within "
               f"+-{100 * t.get('tolerance', 0):.0f}%): {t.get('converged')}."
               if cfg.steps else "") + "\n\n")
    return head, table


def run_bench_dir(cfg: BenchConfig, out, progress: bool = True) -> tuple[dict, str]:
    """``obliviate bench``: :func:`run_bench` into the run directory ``out`` (``bench.md`` and
    ``results.json``); returns the metrics and the tables."""
    out = prepare_out_dir(out)
    metrics = run_bench(cfg, progress=progress, work=out / "control_cache")
    head, table = bench_report(cfg, metrics)
    atomic_write_text(out / "bench.md", head + table + "\n")
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics)
    return metrics, table
