"""Benchmarks: cost of one unlearning step relative to a plain fine-tuning step.

For each registered training method, on the same model and paired batch in the same process:
``step_time_ratio`` (interleaved rounds, :func:`interleaved_ratios`), ``flop_bound`` and
``ratio_to_bound``, ``peak_mem_ratio``, LoRA variants, and the token-filtering classifier's throughput
against pretraining (:func:`measure_filtering`). Definitions and the last results: docs/bench.md.
"""

from __future__ import annotations

import random
import statistics
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from obliviate.data import encode_documents, pack_sequences
from obliviate.eval.core import mcq_accuracy, qa_accuracy
from obliviate.filtering import (FILTERED_MODELS, BiLM, ContextPooled, LogisticHead, TokenClassifier,
                                 TokenClassifierConfig)
from obliviate.losses import lm_loss
from obliviate.methods import METHODS, build_method, method_names
from obliviate.methods.engine import IDK_ANSWERS, PairedData, make_reference, wrap_lora
from obliviate.methods.objectives import answer_logprob, forward_logits, sequence_logprob
from obliviate.models.builders import TinyModelConfig, build_tiny_model, param_count
from obliviate.runs.report import markdown_table
from obliviate.tasks.world import WorldConfig, forget_pairs, full_answer_mcqs, generate_world, retain_pairs
from obliviate.train import TrainConfig, make_lm_batches, make_optimizer, select_trainable
from obliviate.train.pretrain import tokenizer_for


STEP_CONFIG = TrainConfig(lr=1e-6, beta1=0.9, beta2=0.999, weight_decay=0.01, progress=False, report_to=[])
"""The optimizer of the timed steps (:func:`obliviate.train.make_optimizer`): AdamW with torch's default betas and
weight decay and a learning rate small enough that the timed steps barely move the model."""


@dataclass
class BenchConfig:
    seed: int = 0
    methods: list[str] = field(default_factory=list)
    """Methods to time (default: every registered training method)."""
    lora_methods: list[str] = field(default_factory=lambda: ["npo", "rmu"])
    size: str = "tiny"
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
    """Sizes (``"<layers>x<width>"``) of the filtered models; None: the token-filtering recipe's full sizes."""
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


def measure(model, loss_fn, ref_model=None, repeats: int = 5, warmup: int = 2) -> dict:
    """Median step time and peak memory of ``loss_fn`` steps on ``model``'s trainable parameters."""
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
        ref_bytes = 0
        if ref_model is not None and ref_model is not model:
            ref_bytes = _tensor_bytes(list(ref_model.parameters()))
        peak = static + ref_bytes + counter.get("bytes", 0)
        opt.zero_grad(set_to_none=True)
    return {"step_seconds": statistics.median(times), "peak_bytes": int(peak)}


def _world_model(cfg: BenchConfig):
    """The world, a fresh model of ``cfg.size`` and the tokenizer trained for it on the world's documents."""
    world = generate_world(WorldConfig(seed=cfg.seed))
    model, tok = build_tiny_model([d["text"] for d in world.documents()], TinyModelConfig.of_size(cfg.size),
                                  seed=cfg.seed)
    return world, model, tok


def _world_batch(cfg: BenchConfig):
    world, _, tok = _world_model(cfg)
    data = PairedData(tok, forget_pairs(world), retain_pairs(world), cfg.batch_size, cfg.seed, idk=IDK_ANSWERS)
    return tok, data


def prepare_method(name: str, model, data: PairedData, batch: dict, *, lora: bool = False):
    """Method ``name`` set up on ``model`` for single steps on ``batch`` (a step of ``data``), as the executor sets
    it up: its parameters selected, LoRA adapters if ``lora``, its reference and ``setup``. Returns
    ``(model, method, ref)`` (``model`` is the LoRA-wrapped one with ``lora``)."""
    method = build_method(name)
    patterns = method.trainable(model)
    select_trainable(model, patterns)
    if lora:
        model = wrap_lora(model, patterns)
        select_trainable(model, ["*lora_*"])
    ref = make_reference(method, model, data, lora=lora)
    if hasattr(method, "setup"):
        method.setup(model, ref, batch["forget"])
    return model, method, ref


def _quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def interleaved_ratios(steps: dict, baseline: str, *, clock=time.process_time, min_rounds: int = 7,
                       max_rounds: int = 60, tol: float = 0.05, seed: int = 0, wall=time.perf_counter) -> dict:
    """Time ratios of ``steps`` (name -> callable running one step) to ``steps[baseline]``, interleaved.

    Each round calls every step once in a shuffled order (seeded) and records each one's time over the
    baseline's time in that round. After ``min_rounds``, rounds are added until every ratio's
    interquartile range is within ``+-tol`` of its median, or ``max_rounds``. Returns per name
    ``{"ratio", "q1", "q3", "wall_ratio", "rounds", "converged"}`` (the baseline's ratio is 1).
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

    rounds = 0
    while rounds < max_rounds:
        order = names[:]
        rng.shuffle(order)
        cpu, wl = {}, {}
        for n in order:
            c0, w0 = clock(), wall()
            steps[n]()
            cpu[n], wl[n] = clock() - c0, wall() - w0
        for n in ratios:
            ratios[n].append(cpu[n] / cpu[baseline])
            walls[n].append(wl[n] / wl[baseline])
        rounds += 1
        if rounds >= min_rounds and spread_ok():
            break
    converged = spread_ok()
    out = {baseline: {"ratio": 1.0, "q1": 1.0, "q3": 1.0, "wall_ratio": 1.0, "rounds": rounds, "converged": converged}}
    for n, xs in ratios.items():
        q1, med, q3 = _quartiles(xs)
        out[n] = {"ratio": med, "q1": q1, "q3": q3, "wall_ratio": statistics.median(walls[n]), "rounds": rounds,
                  "converged": converged}
    return out


def count_products(models, step) -> dict:
    """Multiply-accumulates of one call of ``step`` in the linear layers of ``models`` (the trained model and a
    live reference copy, if any), each ``rows x in x out``: ``forward``; ``backward``, the products the backward
    pass computes: the weight gradient where the weight is trained and the input gradient where the input
    needs one (so a frozen layer's backward costs one product, a trained one two, a layer before the first
    trained one nothing). The output projection counts only the rows it is applied to (logits at labelled
    positions), a truncated forward only the layers it runs; attention's own products are left out (short
    sequences)."""
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
        counts["backward"] += macs(module, rows) * (int(module.weight.requires_grad) + int(grad_input[0] is not None))

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
        with warnings.catch_warnings():  # a frozen lower layer's hook fires on its output's gradient: as intended
            warnings.simplefilter("ignore", UserWarning)
            step()
    finally:
        for h in handles:
            h.remove()
    return counts


def flop_bound(passes: dict, plain: dict) -> float:
    """The step's cost in plain fine-tuning steps, counting the products it computes (:func:`count_products`).
    For plain fine-tuning the backward computes two products per forward one: forward = 1/3, backward = 2/3."""
    return (passes["forward"] + passes["backward"]) / (plain["forward"] + plain["backward"])


def run_bench(cfg: BenchConfig, progress: bool = True) -> dict:
    torch.manual_seed(cfg.seed)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tok, data = _world_batch(cfg)
    batch = {k: {kk: vv.to(dev) for kk, vv in v.items()} for k, v in data(0).items()}

    def fresh():
        return build_tiny_model(tok, TinyModelConfig.of_size(cfg.size), seed=cfg.seed)[0].to(dev).train()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the process CPU clock then measures the step itself
    try:
        metrics = _time_methods(cfg, fresh, data, batch, dev, progress)
    finally:
        torch.set_num_threads(threads)
    metrics["device"] = str(dev)
    if cfg.logit_memory:
        metrics["logit_memory"] = measure_logit_memory(data(0)["forget"], seed=cfg.seed)
    if cfg.eval_speed:
        if progress:
            print("bench: evaluation throughput, and MCQ scoring against lm-eval", flush=True)
        metrics["eval_speed"] = measure_eval_speed(cfg)
    if cfg.filtering:
        if progress:
            print("bench: data-filtering classifier vs pretraining throughput", flush=True)
        metrics["filtering"] = measure_filtering(cfg)
    return metrics


def _time_methods(cfg: BenchConfig, fresh, data, batch, dev, progress: bool) -> dict:
    base_model = fresh()
    select_trainable(base_model, ["*"])
    names = cfg.methods or [n for n in method_names() if getattr(METHODS[n], "kind", "train") == "train"]
    jobs = [(n, False) for n in names] + [(n, True) for n in cfg.lora_methods]
    runs = {"plain_finetune": (base_model, lambda: {"lm": lm_loss(base_model, batch["forget"])}, None)}
    for name, lora in jobs:
        model, method, ref = prepare_method(name, fresh(), data, batch, lora=lora)
        runs[f"{name}+lora" if lora else name] = (model, (lambda m=model, meth=method, r=ref: meth.loss(m, batch, r)), ref)
    steps = {}
    for key, (model, loss_fn, ref) in runs.items():
        opt = make_optimizer([p for p in model.parameters() if p.requires_grad], STEP_CONFIG)
        steps[key] = (lambda m=model, f=loss_fn, o=opt: _one_step(m, f, o))
        for _ in range(cfg.warmup):
            steps[key]()
    passes = {key: count_products([runs[key][0], getattr(runs[key][2], "model", None)], steps[key])
              for key in tqdm(steps, desc="bench: passes", disable=not progress)}
    if progress:
        print(f"bench: interleaved rounds over {len(steps)} steps", flush=True)
    clock = time.process_time
    if dev.type == "cuda":  # a GPU step is timed on the wall clock, after the device has finished
        def clock():
            torch.cuda.synchronize()
            return time.perf_counter()
    timing = interleaved_ratios(steps, "plain_finetune", min_rounds=cfg.min_rounds, max_rounds=cfg.max_rounds,
                                tol=cfg.tolerance, seed=cfg.seed, clock=clock)
    metrics: dict = {}
    for key, (model, loss_fn, ref) in tqdm(runs.items(), desc="bench: memory", disable=not progress):
        mem = measure(model, loss_fn, getattr(ref, "model", None), repeats=1, warmup=0)
        t = timing[key]
        bound = flop_bound(passes[key], passes["plain_finetune"])
        metrics[key] = {"step_time_ratio": t["ratio"], "step_time_ratio_q1": t["q1"], "step_time_ratio_q3": t["q3"],
                        "wall_time_ratio": t["wall_ratio"], "flop_bound": bound, "ratio_to_bound": t["ratio"] / bound,
                        "peak_bytes": mem["peak_bytes"], "reference_copy": bool(
                            ref is not None and ref.model is not None and not ref.shared),
                        "reference": "none" if ref is None else ref.kind,
                        "products": passes[key]}
        if key != "plain_finetune":
            metrics[key]["peak_mem_ratio"] = mem["peak_bytes"] / metrics["plain_finetune"]["peak_bytes"]
    metrics["timing"] = {"rounds": timing["plain_finetune"]["rounds"],
                         "converged": timing["plain_finetune"]["converged"], "tolerance": cfg.tolerance,
                         "clock": "wall clock, synchronised" if dev.type == "cuda" else "process CPU time, 1 thread"}
    return metrics


def measure_logit_memory(batch: dict, vocab: int = 128_256, d_model: int = 64, seed: int = 0) -> dict:
    """Activation memory of an answer log-probability with full B x T x V logits vs logits only at the
    labelled positions (:func:`obliviate.methods.objectives.sequence_logprob`), on a small-hidden model with a
    ``vocab``-token vocabulary (Llama 3's 128k by default) and ``batch`` (token ids folded into the vocabulary).

    Returns the bytes autograd saves for the backward pass in each case, their ratio, and the share of
    positions that carry a label (the ratio should come out near it: the logits dominate)."""
    model, _ = build_tiny_model(None, TinyModelConfig(n_layer=1, d_model=d_model, n_head=2, vocab_size=vocab), seed)
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
    out.update(vocab=vocab, labelled_share=labelled, memory_ratio=out["labelled_logits_bytes"] / out["full_logits_bytes"])
    return out


def measure_eval_speed(cfg: "BenchConfig", rounds: int = 3) -> dict:
    """Evaluation throughput on the tiny world model's tokenizer and a fresh tiny model: QA greedy generation
    and lettered MCQ scoring (examples per second, process CPU time), and the MCQ time against lm-eval's
    ``simple_evaluate`` on the same questions, model and prompt, interleaved round by round (lm-eval is a dev
    dependency; without it the ratio is None)."""
    world, model, tok = _world_model(cfg)
    model.eval()
    mcqs = full_answer_mcqs(world, world.mcqs(split="forget"))
    facts = world.facts_by_split("forget")
    try:
        from obliviate.eval.lmeval import lmeval_mcq_choices

        import lm_eval  # noqa: F401
    except ImportError:
        lmeval_mcq_choices = None
    times: dict[str, list[float]] = {"qa": [], "mcq": [], "lm_eval_mcq": []}
    for _ in range(rounds):
        for name, fn in (("qa", lambda: qa_accuracy(model, tok, [f["question"] for f in facts],
                                                    [f["answer"] for f in facts])),
                         ("mcq", lambda: mcq_accuracy(model, tok, mcqs, style="letters")),
                         ("lm_eval_mcq", (lambda: lmeval_mcq_choices(model, tok, mcqs)) if lmeval_mcq_choices else None)):
            if fn is None:
                continue
            t = time.process_time()
            fn()
            times[name].append(time.process_time() - t)
    out = {"qa_examples_per_s": len(facts) / statistics.median(times["qa"]),
           "mcq_examples_per_s": len(mcqs) / statistics.median(times["mcq"]), "n_qa": len(facts), "n_mcq": len(mcqs)}
    if times["lm_eval_mcq"]:
        ratios = [a / b for a, b in zip(times["mcq"], times["lm_eval_mcq"])]
        out["mcq_time_vs_lm_eval"] = statistics.median(ratios)
    return out


def filtering_ratio(classifier_tokens_per_s: float, train_tokens_per_s: float, target: float = 20.0) -> dict:
    """Classifier throughput as a multiple of pretraining throughput, and what it means.

    ``cost_fraction = 1 / ratio``: classifying each corpus token once costs that fraction of
    one pretraining pass over it (classifier tokens/s vs pretraining tokens/s, same machine).
    """
    if classifier_tokens_per_s <= 0 or train_tokens_per_s <= 0:
        raise ValueError(f"throughputs must be positive, got {classifier_tokens_per_s} and {train_tokens_per_s}")
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

    halves = [build_tiny_model(tok, TinyModelConfig.of_size(f"{n_layer}x{d}", max_len=fm.row_len), seed=cfg.seed + i)[0]
              for i in range(2)]
    bilm = BiLM(halves[0], halves[1], layer=n_layer - 1, pad_id=tok.pad_token_id)
    window = clf_cfg.context_window if cfg.classifier_window is None else cfg.classifier_window
    feat = ContextPooled(bilm, window) if window else bilm
    clf = TokenClassifier(feat, special_ids=[tok.pad_token_id, tok.bos_token_id, tok.eos_token_id])
    gen = torch.Generator().manual_seed(cfg.seed)
    clf.head = LogisticHead(torch.zeros(feat.dim), torch.ones(feat.dim), torch.randn(feat.dim, generator=gen), 0.0)

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
        out["models"][size] = {"params": param_count(model, non_embedding=False), "train_tokens_per_s": train_tps,
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
    head = (f"Data-filtering classifier ({f['classifier']}, inference) vs pretraining step (forward + backward + "
            f"AdamW), vocabulary {f['vocab_size']}, {f['threads']} thread(s): ratio "
            f"{f['throughput_ratio']:.1f}x for the largest filtered model {f['filtered_model']} "
            f"(target >= {f['target']:g}x: {'met' if f['meets_target'] else 'not met'}).\n\n")
    return head + markdown_table(rows, list(rows[0]), "{:.1f}")


def bench_table(metrics: dict) -> str:
    rows = [{"method": k, **v} for k, v in metrics.items() if isinstance(v, dict) and "step_time_ratio" in v]
    for r in rows:
        r["peak_MiB"] = r["peak_bytes"] / 2**20
        r["IQR"] = f"{r['step_time_ratio_q1']:.2f}-{r['step_time_ratio_q3']:.2f}" if "step_time_ratio_q1" in r else None
    return markdown_table(rows, ["method", "step_time_ratio", "IQR", "wall_time_ratio", "flop_bound", "ratio_to_bound",
                                 "peak_mem_ratio", "peak_MiB", "reference_copy", "reference"], "{:.2f}")