"""Pretraining tiny models on the synthetic world.

``pretrain(cfg, out)`` generates the world, trains (or reuses) a BPE tokenizer on its full corpus,
builds a tiny Llama and trains it with the one training loop on up to three named loss terms
(``lm``, ``qa``, ``mcq``); the oracle excludes the forget split and shares the tokenizer. See
docs/world.md#pretraining.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers.utils import logging as hf_logging

from obliviate.config import config_hash, from_dict, to_dict
from obliviate.data import (
    TokenDataset,
    collate,
    encode_documents,
    encode_prompt_answer,
    pack_sequences,
    qa_answer,
    qa_prompt,
)
from obliviate.errors import ConfigError
from obliviate.eval.core import LETTERS, mcq_prompt
from obliviate.losses import lm_loss, lm_loss_grouped
from obliviate.models.builders import build_model, param_count
from obliviate.models.layers import ResumablePasses, count_passes
from obliviate.models.load import load_tokenizer
from obliviate.models.tokenizer import save_tokenizer, train_tokenizer
from obliviate.utils import atomic_write_text
from obliviate.tasks.world import full_answer_mcqs
from obliviate.train import StepSampler, TrainConfig, make_lm_batches, train
from obliviate.train import distributed as D
from obliviate.train.backend import can_checkpoint
from obliviate.train.distributed import main_process_first
from obliviate.train.sgtm import SGTMConfig, ablate, dedicated_masks, flip_runs, flipped, retain_step, routed_loss
from obliviate.utils import cache_dir, seed_everything
from obliviate.tasks.world import WorldConfig, generate_world


QA_FORMS = ("question", "train_questions", "statements")
"""Surface forms of a fact in the QA term of pretraining (see :func:`qa_pairs_for`)."""


@dataclass
class ModelConfig:
    size: str = "tiny"
    """A named size from ``obliviate.models.builders.SIZES`` (its fields can be overridden below)."""
    n_layer: int | None = 4
    """Decoder layers (default 4: the world's default model is 'tiny' (d=128) at half depth, which
    learns the world faster per step on a CPU than the 8-layer 'tiny')."""
    d_model: int | None = None
    n_head: int | None = None
    d_ff: int | None = None
    vocab_size: int = 2048
    """BPE vocabulary size of the world tokenizer."""
    max_len: int = 256


def _default_pretrain_train() -> TrainConfig:
    return TrainConfig(steps=300, lr=3e-3, warmup_steps=20, schedule="cosine", min_lr_ratio=0.1,
                       weight_decay=0.0, grad_clip=1.0, log_every=10, desc="pretrain")




@dataclass
class PretrainConfig:
    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=_default_pretrain_train)
    batch_size: int = 4
    """Rows of packed documents per step (4 x 256 tokens: the corpus is ~27k tokens, so 300 steps still see
    it ~11 times; the QA term carries the facts)."""
    qa_weight: float = 2.0
    """Weight of the answer-only QA term (0: documents only)."""
    qa_batch_size: int = 64
    qa_length_groups: int = 3
    """Each QA batch runs as this many forwards of rows of like length (sorted, each group cut to its longest
    row): the same loss, a sum over every answer token of the batch over their count
    (:func:`~obliviate.losses. lm_loss_grouped`), with less padding computed (the world's QA rows: 65% of the
    positions are real tokens in one padded batch of 64, 86% in 3 groups). One group in several processes,
    whose sharded forwards must match."""
    qa_forms: list[str] = field(default_factory=lambda: list(QA_FORMS))
    """Surface forms of each fact in the QA term (:data:`QA_FORMS`): ``question`` (canonical),
    ``train_questions`` (the relation's trained paraphrases), ``statements`` (statement completions)."""
    mcq_weight: float = 0.0
    """Weight of the lettered-MCQ practice term (0: none, the default: see docs/world.md, the tiny models
    do not learn the lettered format within this budget)."""
    mcq_batch_size: int = 16
    mcq_options: str = "answer"
    """Options of the practice MCQs: "answer" (whole answer sentences) or "value" (bare values)."""
    exclude_splits: list[str] = field(default_factory=list)
    """World splits left out of the corpus (``["forget"]`` trains the oracle)."""
    mask_splits: list[str] = field(default_factory=list)
    """World splits whose tokens stay in the corpus as inputs but are never a target (loss masking by the
    world's ground-truth ``split`` token labels, the token-filtering paper's masking with perfect labels);
    their facts leave the QA term (an answer is all masked tokens). ``["forget"]`` trains the filtered
    model."""
    route_splits: list[str] = field(default_factory=list)
    """World splits whose tokens train by Selective Gradient Masking (:mod:`obliviate.train.sgtm`): their loss
    updates only the parameters ``sgtm`` dedicates, which are zeroed after training (the saved model is the
    ablated one); their facts' QA pairs stay in the QA term, routed the same way. ``["forget"]`` trains the SGTM
    model. Not with ``mask_splits``."""
    sgtm: SGTMConfig = field(default_factory=SGTMConfig)
    """The parameters SGTM dedicates (heads, MLP units, layers) and its share of retain-mode steps."""
    label_noise: float = 0.0
    """Share of the labelled units of ``mask_splits`` / ``route_splits`` left unlabelled (trained as ordinary
    data): labelled token runs of the corpus and QA pairs, exactly ``round(share * n)`` of each, chosen by
    ``label_noise_seed`` (:func:`obliviate.train.sgtm.flip_runs`); at one seed the runs flipped at 0.1 are among
    those flipped at 0.3."""
    label_noise_seed: int | None = None
    """Seed of the label noise (None: ``seed``)."""
    pack: bool = True
    """Pack whole documents into rows of ``model.max_len`` tokens (no padding; see data.pack_sequences)."""

    def __post_init__(self):
        for key in ("batch_size", "qa_batch_size", "mcq_batch_size", "qa_length_groups"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key '{key}': must be >= 1, got {getattr(self, key)}")
        for form in self.qa_forms:
            if form not in QA_FORMS:
                raise ConfigError(f"config key 'qa_forms': unknown form {form!r} (known: {list(QA_FORMS)})")
        if "question" not in self.qa_forms and self.qa_weight > 0:
            raise ConfigError("config key 'qa_forms': must include 'question' (the canonical QA)")
        known = {"forget", "retain", "general", "concept", "holdout", "neighbour"}
        for key in ("exclude_splits", "mask_splits", "route_splits"):
            for s in getattr(self, key):
                if s not in known:
                    raise ConfigError(f"config key '{key}': unknown split {s!r} (known: {sorted(known)})")
        if self.mask_splits and self.route_splits:
            raise ConfigError("config keys 'mask_splits' and 'route_splits': give one (token filtering or SGTM), "
                              f"got {self.mask_splits} and {self.route_splits}")
        both = sorted(set(self.exclude_splits) & set(self.mask_splits + self.route_splits))
        if both:
            raise ConfigError(f"config key 'exclude_splits': {both} also labelled (mask_splits/route_splits); an "
                              "excluded split has no tokens to label")
        noise = self.label_noise
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise <= 1:
            raise ConfigError(f"config key 'label_noise': must be a share in [0, 1], got {noise!r}")
        if noise and not (self.mask_splits or self.route_splits):
            raise ConfigError("config key 'label_noise': flips labels of mask_splits or route_splits; both are "
                              "empty")


def world_for(cfg: PretrainConfig):
    """The world of a run; its seed is the run seed unless set explicitly in ``world``."""
    return generate_world(cfg.world)


def tokenizer_for(world, vocab_size: int):
    """Train (or load from cache) the world tokenizer on the *full* corpus.

    In several processes rank 0 trains and caches it first; the others then load it.
    """

    key = f"{world.fingerprint()[:16]}-{vocab_size}"
    path = cache_dir() / "tokenizers" / key
    with main_process_first():
        if (path / "tokenizer.json").exists():
            return load_tokenizer(str(path))
        texts = [d["text"] for d in world.documents()]
        texts += [" ".join(f["question_paraphrases"] + [f["answer_paraphrase"], f["probe_statement"]])
                  for f in world.facts]
        texts += [" ".join(f["train_questions"]) for f in world.facts]
        texts += [f"{m['question']} " + " ".join(m["choices"]) for m in world.mcqs()]
        texts += [p["text"] for p in world.relearn_paragraphs]
        tok = train_tokenizer(texts, vocab_size=vocab_size)
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        save_tokenizer(tok, str(tmp))
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
        return load_tokenizer(str(path))


def build_for(cfg: PretrainConfig, tokenizer) -> torch.nn.Module:
    kw = {k: v for k, v in to_dict(cfg.model).items()
          if k in ("n_layer", "d_model", "n_head", "d_ff") and v is not None}
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id)
    return build_model(cfg.model.size, vocab_size=len(tokenizer), seed=cfg.seed, max_len=cfg.model.max_len,
                       **ids, **kw)


def pretrain_param_count(cfg: PretrainConfig) -> int:
    """The parameters of the model ``cfg`` pretrains, counted without a tokenizer or weights (built on the meta
    device with ``cfg.model.vocab_size`` rows, which the world tokenizer's special tokens may exceed by a
    few): what picks the methods' preset before anything is trained."""
    kw = {k: v for k, v in to_dict(cfg.model).items()
          if k in ("n_layer", "d_model", "n_head", "d_ff") and v is not None}
    with torch.device("meta"):
        model = build_model(cfg.model.size, vocab_size=cfg.model.vocab_size, max_len=cfg.model.max_len, **kw)
    return param_count(model, non_embedding=False)


QA_SPLITS = ("forget", "retain", "general", "concept", "neighbour")
"""The splits whose facts are trained (holdout never is)."""


def statement_completions(fact: dict) -> list[tuple[str, str]]:
    """``(prefix, " " + rest)`` of each of the fact's statements that names the entity before the value,
    cut just before the value ("Doctors treat Morvexia with", " groxpril.")."""
    out = []
    for text in fact["statements"]:
        e, v = text.find(fact["entity"]), text.rfind(fact["value"])
        if 0 <= e and e + len(fact["entity"]) <= v:
            out.append((text[:v].rstrip(), " " + text[v:]))
    return out


def qa_pairs_for(world, exclude_splits=(), forms=("question",)) -> list[tuple[str, str]]:
    """(prompt, answer) of the QA term: for every fact of a trained split not excluded, its canonical
    QA, then (with those ``forms``) its trained paraphrased questions and its statement completions."""

    pairs = []
    for split in QA_SPLITS:
        if split in exclude_splits:
            continue
        for f in world.facts_by_split(split):
            if "question" in forms:
                pairs.append((qa_prompt(f["question"]), qa_answer(f["answer"])))
            if "train_questions" in forms:
                pairs += [(qa_prompt(q), qa_answer(f["answer"])) for q in f["train_questions"]]
            if "statements" in forms:
                pairs += statement_completions(f)
    return pairs


def mcq_pairs_for(world, exclude_splits=(), options: str = "answer") -> list[tuple[str, str]]:
    """(lettered prompt, " A".." D") of the world's practice MCQs (never a forget fact's MCQ); ``options``
    "answer": written as whole answer sentences (:func:`~obliviate.tasks.world.full_answer_mcqs`), "value":
    bare values."""

    mcqs = world.practice_mcqs(exclude_splits=tuple(exclude_splits))
    if options == "answer":
        mcqs = full_answer_mcqs(world, mcqs)
    return [(mcq_prompt(m["question"], m["choices"]), " " + LETTERS[m["answer_index"]]) for m in mcqs]


def split_token_masks(dataset, splits) -> list:
    """Per sequence of ``dataset`` (encoded with the ``split`` token labels), 1 where a token's ground-truth
    split is one of ``splits``, else 0."""
    names = dataset.vocab.get("split", [])
    codes = [names.index(s) for s in splits if s in names]
    return [np.isin(np.asarray(lab), codes).astype(np.int64) for lab in dataset.labels["split"]]


def split_label_masks(dataset, splits) -> list:
    """Per sequence of ``dataset`` (encoded with the ``split`` token labels), 1 where a token is a target and
    0 where its ground-truth split is one of ``splits`` (:attr:`PretrainConfig.mask_splits`)."""
    return [1 - m for m in split_token_masks(dataset, splits)]


LABELLED = "labelled"
"""The token-label field :func:`labelled_dataset` adds: 1 for a token labelled (after the noise)."""


def labelled_dataset(dataset: TokenDataset, splits, share: float, seed: int) -> tuple[TokenDataset, dict]:
    """``dataset`` (encoded documents, before packing) with the field :data:`LABELLED`: its tokens of
    ``splits``, less a ``share`` of their runs flipped to unlabelled (:func:`~obliviate.train.sgtm.flip_runs`),
    and what the noise did (``runs``, ``flipped``)."""
    marks, n_runs, n_flipped = flip_runs(split_token_masks(dataset, splits), share, seed)
    labels = {**dataset.labels, LABELLED: marks}
    return (TokenDataset(dataset.input_ids, labels, {**dataset.vocab, LABELLED: ["0", "1"]}),
            {"runs": n_runs, "flipped": n_flipped})


def labelled_qa_pairs(world, cfg: PretrainConfig) -> tuple[list, list, dict]:
    """``(unlabelled, labelled, noise)``: the QA pairs of the labelled splits (``mask_splits`` /
    ``route_splits``), split by the label noise (``label_noise``, the QA pairs' own seeded draw), and what the
    noise did (``pairs``, ``flipped``)."""
    splits = cfg.mask_splits or cfg.route_splits
    pairs = qa_pairs_for(world, [s for s in QA_SPLITS if s not in splits], cfg.qa_forms)
    flip = flipped(len(pairs), cfg.label_noise, noise_seed(cfg) + 1)
    return ([p for p, f in zip(pairs, flip) if f], [p for p, f in zip(pairs, flip) if not f],
            {"pairs": len(pairs), "flipped": int(flip.sum())})


def noise_seed(cfg: PretrainConfig) -> int:
    """The label noise's seed: ``label_noise_seed``, else the run seed."""
    return cfg.seed if cfg.label_noise_seed is None else cfg.label_noise_seed


def pretrain(cfg: PretrainConfig, out_dir: str | Path, *, resume: bool = True,
             progress: bool | None = None) -> dict:
    """Train a tiny model on the world; save it (safetensors) and its tokenizer in ``out_dir/model``.

    Runs under ``accelerate launch`` too: each process trains on its rows of each global
    batch of ``batch_size`` (``qa_batch_size``) rows and only rank 0 writes files.
    """

    out = Path(out_dir)
    seed_everything(cfg.seed)
    world = world_for(cfg)
    tok = tokenizer_for(world, cfg.model.vocab_size)
    if cfg.route_splits and (D.world_size() > 1 or D.sharding()):
        raise ConfigError("config key 'route_splits': SGTM pretraining runs in one process")
    docs = world.documents(exclude_splits=tuple(cfg.exclude_splits))
    dataset = encode_documents(tok, docs, max_len=cfg.model.max_len)
    splits = cfg.mask_splits or cfg.route_splits
    noise: dict = {}
    if splits:
        dataset, noise["tokens"] = labelled_dataset(dataset, splits, cfg.label_noise, noise_seed(cfg))
    if cfg.pack:
        dataset = pack_sequences(dataset, cfg.model.max_len)
    seed_everything(cfg.seed)
    model = build_for(cfg, tok)
    sgtm_masks = dedicated_masks(model, cfg.sgtm) if cfg.route_splits else None
    marks = dataset.labels.get(LABELLED)
    masks = [1 - m for m in marks] if cfg.mask_splits else None
    lm_batch = make_lm_batches(dataset, cfg.batch_size, cfg.seed, tok.pad_token_id, label_masks=masks,
                               extra={"routed": marks} if cfg.route_splits else None)
    left_out = [*cfg.exclude_splits, *splits]
    pairs = qa_pairs_for(world, left_out, cfg.qa_forms) if cfg.qa_weight > 0 else []
    routed_pairs: list = []
    if splits and cfg.qa_weight > 0:
        unlabelled, labelled, noise["qa"] = labelled_qa_pairs(world, cfg)
        pairs += unlabelled  # left unlabelled by the noise: ordinary QA pairs
        routed_pairs = labelled if cfg.route_splits else []  # filtering: they leave the QA term
    mcq_pairs = mcq_pairs_for(world, left_out, cfg.mcq_options) if cfg.mcq_weight > 0 else []
    terms_data = {}
    for name, items, bs, weight, seed in (("qa", pairs + routed_pairs, cfg.qa_batch_size, cfg.qa_weight,
                                           cfg.seed + 1),
                                          ("mcq", mcq_pairs, cfg.mcq_batch_size, cfg.mcq_weight,
                                           cfg.seed + 2)):
        if items:
            ids, answer_masks = encode_prompt_answer(tok, [p for p, _ in items], [a for _, a in items],
                                                     cfg.model.max_len)
            terms_data[name] = (ids, answer_masks, StepSampler(len(ids), bs, seed), weight)
    # SGTM: 1 for the QA term's rows whose answer is routed
    qa_routed = np.arange(len(pairs) + len(routed_pairs)) >= len(pairs) if cfg.route_splits else None

    n_groups = 1 if D.world_size() > 1 else cfg.qa_length_groups  # every process runs as many forwards

    def routed_rows(name: str, rows) -> dict | None:
        """SGTM: the routed marks of QA rows ``rows`` (each row all 1 where its answer is routed, else 0)."""
        if name != "qa" or qa_routed is None:
            return None
        return {"routed": [np.full(len(terms_data[name][0][i]), int(qa_routed[i])) for i in rows]}

    def batch_fn(step: int) -> dict:
        batch = {"lm": lm_batch(step)}
        for name, (ids, answer_masks, sampler, _) in terms_data.items():
            idx = sorted(sampler(step), key=lambda i: len(ids[i]))  # stable: ties keep the sampler's order
            groups = [g for g in np.array_split(np.asarray(idx, dtype=np.int64), n_groups) if len(g)]
            batch[name] = {str(k): collate([ids[i] for i in g], tok.pad_token_id,
                                           label_mask=[answer_masks[i] for i in g], extra=routed_rows(name, g))
                           for k, g in enumerate(groups)}  # a dict: the loop cuts a list as rows
        return batch

    def loss_fn(m, batch, step):
        if sgtm_masks is not None:  # SGTM: routed tokens train the dedicated parameters only
            off = retain_step(cfg.seed, step, cfg.sgtm.retain_share)
            terms = {"lm": routed_loss(m, [batch["lm"]], sgtm_masks, off)}
            if "qa" in terms_data:
                terms["qa"] = terms_data["qa"][3] * routed_loss(m, list(batch["qa"].values()), sgtm_masks, off)
            if "mcq" in terms_data:  # never a forget fact's MCQ: trained as it is
                terms["mcq"] = terms_data["mcq"][3] * lm_loss_grouped(m, list(batch["mcq"].values()))
            return terms
        terms = {"lm": lm_loss(m, batch["lm"])}
        for name, (_, _, _, weight) in terms_data.items():
            # logits at the answers only
            terms[name] = weight * lm_loss_grouped(m, list(batch[name].values()))
        return terms

    tcfg = cfg.train if progress is None else TrainConfig(**{**to_dict(cfg.train), "progress": progress})
    with count_passes(model) as passes:  # this process's passes (a resumed run: the checkpoint's carried over)
        carried = ResumablePasses(passes)
        summary = train(model, loss_fn, batch_fn, tcfg, out, resume=resume, state_hooks=carried.hooks)
    model.eval()
    last = next((r for r in reversed(summary["history"]) if "loss" in r), {})
    info = {"n_rows": len(dataset), "n_tokens": dataset.n_tokens(), "n_qa_pairs": len(pairs) + len(routed_pairs),
            "masked_tokens": 0 if masks is None else int(sum(len(m) - int(m.sum()) for m in masks)),
            "n_mcq_pairs": len(mcq_pairs), "steps": tcfg.steps, "final_lm_loss": last.get("lm"),
            "final_qa_loss": last.get("qa"), "final_mcq_loss": last.get("mcq"),
            "passes": dict(passes), "resumed_from": summary.get("resumed_from", 0),
            "passes_whole_run": carried.whole_run(summary.get("resumed_from", 0))}
    if splits:
        info["label_noise"] = {"share": cfg.label_noise, "seed": noise_seed(cfg), **noise}
    if sgtm_masks is not None:  # the saved model is the ablated one
        n_params = sum(p.numel() for p in model.parameters())
        zeroed = ablate(model, sgtm_masks)
        info["sgtm"] = {"routed_tokens": int(sum(int(m.sum()) for m in marks)), "routed_qa_pairs": len(routed_pairs),
                        "ablated_entries": zeroed, "ablated_share": zeroed / n_params,
                        "retain_mode_steps": sum(retain_step(cfg.seed, s, cfg.sgtm.retain_share)
                                                 for s in range(tcfg.steps))}
    D.save_trained(model, out / "model", tok)
    if D.is_main_process():
        atomic_write_text(out / "model" / "world_config.json", json.dumps(to_dict(cfg.world), sort_keys=True))
        atomic_write_text(out / "pretrain.json", json.dumps(info, indent=2))
    D.barrier()
    return {"model_dir": out / "model", "world": world, "tokenizer": tok, "model": model, "dataset": dataset,
            "summary": summary, "info": info}


def _pretrain_in_child(cfg_dicts: list[dict], cache: str | None) -> None:
    """Child process of :func:`cached_pretrain_all`: its share of the configs, one thread, no progress bar
    (the libraries' bars, such as transformers' "Writing model shards", off too: a spawned process starts with
    them on)."""
    import os

    if cache is not None:
        os.environ["OBLIVIATE_CACHE"] = cache
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)
    for d in cfg_dicts:
        cached_pretrain(from_dict(PretrainConfig, d), progress=False)


def cached_pretrain_all(cfgs: list[PretrainConfig], progress: bool | None = None,
                        parallel: bool = True) -> list[Path]:
    """:func:`cached_pretrain` of each of ``cfgs`` (the base model, the oracle, ...); with ``parallel``, two
    at a time: every second config in a child process, the others here, each process on one thread (on 2 cores
    this nearly halves the wall time; with one thread per model the result does not depend on what else runs).
    The tokenizers are trained first, in this process. In several processes (``accelerate launch``) they run
    one after the other."""
    import multiprocessing as mp
    import os

    if not parallel or len(cfgs) < 2 or D.world_size() > 1 or D.sharding():
        return [cached_pretrain(c, progress) for c in cfgs]
    seen = set()
    for c in cfgs:
        key = (c.model.vocab_size, repr(c.world))  # one tokenizer per world and vocabulary
        if key not in seen:
            seen.add(key)
            tokenizer_for(world_for(c), c.model.vocab_size)
    child = mp.get_context("spawn").Process(target=_pretrain_in_child,
                                            args=([to_dict(c) for c in cfgs[1::2]],
                                                  os.environ.get("OBLIVIATE_CACHE")))
    threads = torch.get_num_threads()
    child.start()
    try:
        torch.set_num_threads(1)
        for c in cfgs[0::2]:
            cached_pretrain(c, progress)
    except BaseException:
        child.terminate()
        raise
    finally:
        torch.set_num_threads(threads)
    child.join()
    # finished there: read from the cache; failed there: resumed here, where its error can be read
    return [cached_pretrain(c, progress) for c in cfgs]


def cached_pretrain_pair(first: PretrainConfig, second: PretrainConfig, progress: bool | None = None,
                         parallel: bool = True) -> tuple[Path, Path]:
    """:func:`cached_pretrain_all` of two configs (the base model and the oracle)."""
    a, b = cached_pretrain_all([first, second], progress, parallel)
    return a, b


def cache_key_config(cfg: PretrainConfig) -> dict:
    """The config as :func:`cached_pretrain`'s key reads it: the SGTM and label-noise settings are left out
    where they change nothing (no ``route_splits``; no noise), so a model cached before they existed is
    reused."""
    d = to_dict(cfg)
    if not cfg.route_splits:
        d.pop("route_splits")
        d.pop("sgtm")
    if not cfg.label_noise:
        d.pop("label_noise")
        d.pop("label_noise_seed")
    return d


def cached_pretrain(cfg: PretrainConfig, progress: bool | None = None) -> Path:
    """Pretrain once per config (hash); return the directory holding ``model/``.

    A partially trained cache entry resumes from its last checkpoint; a
    finished one is reused as is. The key holds the world's fingerprint as well as the config, so
    a model trained on a world that a newer generator renders differently is never reused.
    """

    what = {"config": cache_key_config(cfg), "world": world_for(cfg).fingerprint()}
    root = cache_dir() / "pretrain" / config_hash(what)
    if (root / "DONE").exists() and (root / "model" / "config.json").exists():
        return root
    D.barrier()  # every process has looked for DONE before rank 0 writes into the entry
    root.mkdir(parents=True, exist_ok=True)
    if D.is_main_process():
        (root / "config.json").write_text(json.dumps(to_dict(cfg), indent=2, sort_keys=True))
    cfg_ck = copy.deepcopy(cfg)
    if cfg_ck.train.checkpoint_every == 0 and can_checkpoint():
        cfg_ck.train.checkpoint_every = 50
    pretrain(cfg_ck, root, resume=True, progress=progress)
    if D.is_main_process():
        shutil.rmtree(root / "checkpoints", ignore_errors=True)
        (root / "DONE").write_text("ok\n")
    D.barrier()
    return root
