"""The tiny-model TOFU protocol (Maini et al. 2024), ``obliviate tofu``.

1. A byte-level BPE tokenizer is trained on all TOFU QA text (``full``, every ``*_perturbed``
   file, ``real_authors``, ``world_facts``: questions, answers, paraphrases, perturbed answers,
   options).
2. A tiny Llama is fine-tuned *from scratch* on the ``full`` QA pairs (loss on the answer
   tokens only, :func:`obliviate.data.encode_prompt_answer`, prompt
   :func:`obliviate.eval.tofu.tofu_prompt`) with the one training loop; a *retain-only*
   model, same config, on ``retain90``. Both are cached by config hash under
   ``<cache>/tofu/<hash>/`` (resumable checkpoints while training, ``DONE`` when finished),
   with their TOFU evaluations, so re-running a method retrains nothing.
3. ``forget10`` is unlearned with any registered method (:func:`obliviate.unlearn.unlearn`;
   forget = forget10 QA, retain = retain90 QA).
4. :func:`obliviate.eval.tofu.tofu_eval` on ``forget10_perturbed``, ``retain_perturbed``,
   ``real_authors_perturbed`` and ``world_facts_perturbed``; forget quality is the KS-test
   p-value against the retain-only model's forget-set truth ratios.

``results.json``: ``metrics.base``, ``metrics.retain_model`` and ``metrics.<method>``, each
with every scalar of :func:`~obliviate.eval.tofu.tofu_eval` plus ``forget10_rouge_l``
(= ``forget_rouge_l``); ``forget_quality`` for base and method. Per-example truth ratios
and greedy answers go to ``per_example.json``.

With ``limit=N`` every split is cut to its first N records, and the base model is trained
on ``forget10[:N] + retain90[:N]`` (so that the forget examples it is evaluated on are in
its training data); this is for tests, not for reporting.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from obliviate.compare import FALLBACK_DEFAULT, TINY_DEFAULTS, MethodRun
from obliviate.config import config_hash, from_dict, to_dict
from obliviate.errors import ConfigError, DataError

TRAIN_SPLITS = ("full", "retain90", "forget10")
EVAL_SPLITS = {"forget": "forget10_perturbed", "retain": "retain_perturbed",
               "real_authors": "real_authors_perturbed", "world_facts": "world_facts_perturbed"}
TOKENIZER_SPLITS = ("full", "forget01_perturbed", "forget05_perturbed", "forget10_perturbed", "retain_perturbed",
                    "real_authors", "real_authors_perturbed", "world_facts", "world_facts_perturbed")
REQUIRED_FILES = tuple(dict.fromkeys(TRAIN_SPLITS + tuple(EVAL_SPLITS.values()) + TOKENIZER_SPLITS))
"""Every TOFU file the protocol reads (without ``.json``)."""

TOFU_UNLEARN_DEFAULTS: dict[str, dict] = {}
"""Per-method unlearning defaults for the TOFU tiny models; methods not listed use
:data:`obliviate.compare.TINY_DEFAULTS` (lr, steps, params)."""


@dataclass
class TofuModelConfig:
    n_layer: int = 2
    d_model: int = 256
    n_head: int = 4
    d_ff: int | None = None
    """MLP width (default: 8/3 d_model)."""
    vocab_size: int = 4096
    """Upper bound of the BPE vocabulary trained on TOFU text."""
    max_len: int = 512
    """Context length; longer prompt + answer sequences are cut when fine-tuning."""


@dataclass
class TofuConfig:
    seed: int = 0
    method: str = "graddiff"
    """Unlearning method (``obliviate methods``)."""
    model: TofuModelConfig = field(default_factory=TofuModelConfig)
    epochs: int = 20
    """Fine-tuning epochs for both base models. 30 epochs gave forget10 ROUGE-L 0.9996 (2 cores:
    20.5 min for ``full``); 20 keep the whole protocol well inside 45 minutes (docs/tofu.md)."""
    lr: float = 1e-3
    batch_size: int = 16
    warmup_steps: int = 100
    weight_decay: float = 0.0
    checkpoint_every: int = 500
    """Fine-tuning checkpoint interval (steps): an interrupted run resumes from here."""
    limit: int | None = None
    """Use only the first N records of each TOFU split (tests)."""
    unlearn: MethodRun = field(default_factory=MethodRun)
    """Unlearning overrides: ``unlearn.lr``, ``unlearn.steps``, ``unlearn.batch_size``, ``unlearn.params.beta``."""
    eval_batch_size: int = 32
    max_new_tokens: int = 128
    """Greedy tokens generated per answer for ROUGE-L (TOFU answers are up to ~100 tokens)."""
    data: str | None = None
    """Data directory (default ``$OBLIVIATE_DATA``, else ``../shared/data``)."""

    def __post_init__(self):
        for key in ("epochs", "batch_size", "eval_batch_size", "max_new_tokens"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key '{key}': must be >= 1, got {getattr(self, key)}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"config key 'limit': must be >= 1, got {self.limit}")
        if self.lr <= 0:
            raise ConfigError(f"config key 'lr': must be > 0, got {self.lr}")


# ------------------------------------------------------------------ data

def check_tofu_data(root=None) -> Path:
    """The ``tofu/`` directory, or a :class:`DataError` naming the missing files."""
    from obliviate.benchmarks._io import root_dir

    d = root_dir(root) / "tofu"
    missing = [f"{s}.json" for s in REQUIRED_FILES if not (d / f"{s}.json").is_file()]
    if missing:
        raise DataError(f"TOFU data not found: {d} lacks {', '.join(missing)} "
                        "(set $OBLIVIATE_DATA to the data directory, or config key 'data')")
    return d


def load_tofu_sets(cfg: TofuConfig) -> dict[str, list]:
    """Every split the protocol uses, each cut to ``cfg.limit`` records."""
    from obliviate.benchmarks import load_tofu

    check_tofu_data(cfg.data)
    return {s: load_tofu(s, root=cfg.data)[:cfg.limit] for s in REQUIRED_FILES}


def qa_pairs(examples) -> list[tuple[str, str]]:
    """(prompt, answer) pairs in the TOFU format: ``tofu_prompt(q)``, ``" " + a``."""
    from obliviate.eval.tofu import tofu_answer, tofu_prompt

    return [(tofu_prompt(ex.question), tofu_answer(ex.answer)) for ex in examples]


def base_train_pairs(sets: dict, which: str, limit: int | None) -> list[tuple[str, str]]:
    """Fine-tuning pairs of the ``"full"`` or ``"retain90"`` model (see the module docstring for ``limit``)."""
    if which == "retain90":
        return qa_pairs(sets["retain90"])
    if which != "full":
        raise ValueError(which)
    return qa_pairs(sets["forget10"] + sets["retain90"]) if limit is not None else qa_pairs(sets["full"])


def tokenizer_texts(sets: dict) -> list[str]:
    from obliviate.eval.tofu import tofu_prompt

    texts = []
    for split in TOKENIZER_SPLITS:
        for ex in sets[split]:
            texts.append(f"{tofu_prompt(ex.question)} {ex.answer}")
            texts += [t for t in (ex.paraphrased_question, ex.paraphrased_answer) if t]
            texts += list(ex.perturbed_answers or []) + list(ex.options or [])
    return texts


def _digest(texts) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


# ------------------------------------------------------------------ cached pieces

def tofu_tokenizer(sets: dict, vocab_size: int):
    """Train (or load from the cache) the tokenizer on all TOFU QA text; returns (tokenizer, key)."""
    from obliviate.models.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
    from obliviate.train.distributed import main_process_first
    from obliviate.utils import cache_dir

    texts = tokenizer_texts(sets)
    key = f"{_digest(texts)}-{vocab_size}"
    path = cache_dir() / "tofu" / "tokenizers" / key
    with main_process_first():  # several processes: rank 0 trains and caches it, the others load it
        if not (path / "tokenizer.json").exists():
            tmp = path.with_name(path.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            save_tokenizer(train_tokenizer(texts, vocab_size=vocab_size), tmp)
            shutil.rmtree(path, ignore_errors=True)
            tmp.rename(path)
    return load_tokenizer(str(path)), key


def finetune_key(cfg: TofuConfig, which: str, tokenizer_key: str, pairs) -> dict:
    """Everything a fine-tuned base model depends on (its cache key is the hash of this)."""
    return {"which": which, "seed": cfg.seed, "model": to_dict(cfg.model), "epochs": cfg.epochs, "lr": cfg.lr,
            "batch_size": cfg.batch_size, "warmup_steps": cfg.warmup_steps, "weight_decay": cfg.weight_decay,
            "limit": cfg.limit, "tokenizer": tokenizer_key, "batches": "length-grouped", "data": _digest(p + a for p, a in pairs)}


def cached_finetune(cfg: TofuConfig, which: str, tokenizer, tokenizer_key: str, pairs,
                    progress: bool | None = None) -> tuple[Path, bool]:
    """Fine-tune a tiny model from scratch on ``pairs`` once per config; returns (dir holding ``model/``, trained now).

    Under ``accelerate launch`` each process trains on its rows of each global batch and
    only rank 0 writes the cache entry.
    """
    from obliviate.data import collate, encode_prompt_answer
    from obliviate.losses import lm_loss, lm_loss_labelled
    from obliviate.models.builders import tiny_llama
    from obliviate.train import StepSampler, TrainConfig, train
    from obliviate.train import distributed as D
    from obliviate.utils import cache_dir, seed_everything

    key = finetune_key(cfg, which, tokenizer_key, pairs)
    root = cache_dir() / "tofu" / config_hash(key)
    if (root / "DONE").exists() and (root / "model" / "config.json").exists():
        return root, False
    D.barrier()  # every process has looked for DONE before rank 0 writes into the entry
    root.mkdir(parents=True, exist_ok=True)
    if D.is_main_process():
        (root / "config.json").write_text(json.dumps(key, indent=2, sort_keys=True))
    m = cfg.model
    seed_everything(cfg.seed)
    model = tiny_llama(len(tokenizer), n_layer=m.n_layer, d_model=m.d_model, n_head=m.n_head, d_ff=m.d_ff,
                       max_len=m.max_len, seed=cfg.seed, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    ids, masks = encode_prompt_answer(tokenizer, [p for p, _ in pairs], [a for _, a in pairs], m.max_len)
    sampler = StepSampler(len(ids), cfg.batch_size, cfg.seed, lengths=[len(x) for x in ids])
    steps = cfg.epochs * sampler.per_epoch
    pad = tokenizer.pad_token_id

    def batch_fn(step: int) -> dict:
        idx = sampler(step)
        return collate([ids[i] for i in idx], pad, label_mask=[masks[i] for i in idx])

    tcfg = TrainConfig(steps=steps, lr=cfg.lr, warmup_steps=min(cfg.warmup_steps, steps // 10),
                       schedule="cosine", min_lr_ratio=0.1, weight_decay=cfg.weight_decay, grad_clip=1.0,
                       log_every=max(1, min(50, steps // 20)),
                       checkpoint_every=0 if D.sharding() else cfg.checkpoint_every,  # none when sharded
                       desc=f"tofu {which}", **({"progress": progress} if progress is not None else {}))
    # lm_loss_labelled runs the unwrapped body and head, which a sharded model only allows through its wrapper
    qa_loss = lm_loss if D.sharding() else lm_loss_labelled
    summary = train(model, lambda mdl, b, s: {"qa": qa_loss(mdl, b)}, batch_fn, tcfg, root, resume=True)
    model.eval()
    D.save_trained(model, root / "model", summary, tokenizer)
    if D.is_main_process():
        shutil.rmtree(root / "checkpoints", ignore_errors=True)
        (root / "DONE").write_text("ok\n")
    D.barrier()
    return root, True


def evaluate(model, tokenizer, sets: dict, cfg: TofuConfig) -> dict:
    """:func:`obliviate.eval.tofu.tofu_eval` on the protocol's four evaluation sets (no forget quality)."""
    from obliviate.eval.tofu import tofu_eval

    res = tofu_eval(model, tokenizer, *(sets[EVAL_SPLITS[k]] for k in ("forget", "retain", "real_authors",
                                                                       "world_facts")),
                    batch_size=cfg.eval_batch_size, max_new_tokens=cfg.max_new_tokens)
    res["forget10_rouge_l"] = res["forget_rouge_l"]
    return res


def cached_evaluate(root: Path, tokenizer, sets: dict, cfg: TofuConfig) -> tuple[dict, bool]:
    """:func:`evaluate` of the cached model in ``root/model``, stored next to it; returns (result, computed now)."""
    from obliviate.models.load import load_model
    from obliviate.results import atomic_write_json

    key = config_hash({"eval": {k: _digest(json.dumps(ex.to_dict(), sort_keys=True) for ex in sets[s])
                                for k, s in EVAL_SPLITS.items()},
                       "max_new_tokens": cfg.max_new_tokens})
    path = root / f"eval-{key}.json"
    if path.exists():
        return json.loads(path.read_text()), False
    res = evaluate(load_model(str(root / "model")), tokenizer, sets, cfg)
    atomic_write_json(path, res)
    return json.loads(path.read_text()), True


def unlearn_config(cfg: TofuConfig):
    """The :class:`~obliviate.unlearn.UnlearnConfig` of ``cfg.method`` (defaults, then ``cfg.unlearn``)."""
    from obliviate.methods import get_method
    from obliviate.train import TrainConfig
    from obliviate.unlearn import UnlearnConfig

    get_method(cfg.method)  # unknown names fail before any training
    base = TOFU_UNLEARN_DEFAULTS.get(cfg.method) or TINY_DEFAULTS.get(cfg.method, FALLBACK_DEFAULT)
    run = cfg.unlearn
    params = {**base["params"], **run.params}
    tc = TrainConfig(steps=run.steps or base["steps"], lr=run.lr or base["lr"], schedule="constant", log_every=5,
                     desc=cfg.method)
    return UnlearnConfig(method=cfg.method, params=params, train=tc, batch_size=run.batch_size, lora=run.lora,
                         seed=cfg.seed)


# ------------------------------------------------------------------ the protocol

@dataclass
class TofuBases:
    """The protocol's cached pieces, shared by every method run on them (:func:`prepare_bases`)."""

    sets: dict
    """Every TOFU split the protocol reads (:func:`load_tofu_sets`)."""
    tokenizer: object
    roots: dict
    """``{"base": dir, "retain_model": dir}``, each holding ``model/``."""
    metrics: dict
    """TOFU metrics of ``base`` (with ``forget_quality``) and ``retain_model``."""
    per_example: dict
    """Per-example forget truth ratios and greedy answers of both models."""
    timings: dict

    @property
    def retain_truth_ratios(self) -> list:
        """Forget-set truth ratios of the retain-only model: forget quality is measured against these."""
        return self.per_example["retain_model"]["forget_truth_ratio"]


def prepare_bases(cfg: TofuConfig, progress: bool | None = None) -> TofuBases:
    """Steps 1-3 of the protocol: data, tokenizer, both fine-tuned models and their evaluations (all cached)."""
    from obliviate.eval.tofu import forget_quality

    timings: dict = {}
    sets = load_tofu_sets(cfg)
    t = time.time()
    tok, tok_key = tofu_tokenizer(sets, cfg.model.vocab_size)
    timings["tokenizer_s"] = time.time() - t
    metrics: dict = {}
    per_example: dict = {}
    roots = {}
    for name, which in (("base", "full"), ("retain_model", "retain90")):
        t = time.time()
        roots[name], trained = cached_finetune(cfg, which, tok, tok_key, base_train_pairs(sets, which, cfg.limit),
                                               progress=progress)
        timings[f"{name}_finetune_s"] = time.time() - t
        timings[f"{name}_cached"] = not trained
        t = time.time()
        res, _ = cached_evaluate(roots[name], tok, sets, cfg)
        timings[f"{name}_eval_s"] = time.time() - t
        per_example[name] = res.pop("per_example")
        metrics[name] = res
    retain_tr = per_example["retain_model"]["forget_truth_ratio"]
    metrics["base"]["forget_quality"] = forget_quality(per_example["base"]["forget_truth_ratio"], retain_tr)
    return TofuBases(sets=sets, tokenizer=tok, roots=roots, metrics=metrics, per_example=per_example,
                     timings=timings)


def unlearn_and_evaluate(cfg: TofuConfig, bases: TofuBases, out_dir: str | Path | None,
                         progress: bool | None = None) -> tuple:
    """Steps 4-5 for ``cfg.method`` on the cached base model: returns (model, metrics, per_example, timings,
    training summary).

    ``metrics`` has every scalar of :func:`evaluate` plus ``forget_quality``; ``out_dir``
    receives the unlearning run's logs (None: none written).
    """
    from obliviate.eval.tofu import forget_quality
    from obliviate.models.load import load_model
    from obliviate.unlearn import unlearn
    from obliviate.utils import seed_everything

    ucfg = unlearn_config(cfg)
    timings: dict = {}
    t = time.time()
    seed_everything(cfg.seed)
    model = load_model(str(bases.roots["base"] / "model"))
    model, summary = unlearn(model, bases.tokenizer, qa_pairs(bases.sets["forget10"]), qa_pairs(bases.sets["retain90"]),
                       ucfg, out_dir, progress=progress, resume=False)
    timings["unlearn_s"] = time.time() - t
    t = time.time()
    res = evaluate(model, bases.tokenizer, bases.sets, cfg)
    timings["method_eval_s"] = time.time() - t
    per_example = res.pop("per_example")
    res["forget_quality"] = forget_quality(per_example["forget_truth_ratio"], bases.retain_truth_ratios)
    return model, res, per_example, timings, summary


def run_tofu(cfg: TofuConfig, out: str | Path, progress: bool | None = None) -> dict:
    """Run the protocol for ``cfg.method``; write ``out/results.json`` and ``out/per_example.json``.

    Returns ``{"metrics", "per_example", "timings"}``.
    """
    from obliviate.results import atomic_write_json, write_results
    from obliviate.train import distributed as D

    out = Path(out)
    ucfg = unlearn_config(cfg)  # unknown methods fail before any training
    t_all = time.time()
    bases = prepare_bases(cfg, progress)
    model, res, per, tims, summary = unlearn_and_evaluate(cfg, bases, out / "unlearn", progress)
    metrics = {**bases.metrics, cfg.method: res}
    per_example = {**bases.per_example, cfg.method: per}
    timings = {**bases.timings, **tims}
    D.save_trained(model, out / "model", summary, bases.tokenizer)  # rank 0 writes, in one process or several
    timings["total_s"] = time.time() - t_all
    if D.is_main_process():
        atomic_write_json(out / "per_example.json", per_example)
    write_results(out, seed=cfg.seed, config=cfg, metrics=metrics, timings=timings,
                  unlearn_config=to_dict(ucfg), base_dirs={k: str(v) for k, v in bases.roots.items()},
                  model_dir=str(out / "model"))
    return {"metrics": metrics, "per_example": per_example, "timings": timings}


def tofu_config(**overrides) -> TofuConfig:
    """A :class:`TofuConfig` from nested keyword overrides (e.g. ``model={"d_model": 32}``, ``limit=20``)."""
    return from_dict(TofuConfig, copy.deepcopy(overrides))
