"""Pretraining tiny models on the synthetic world.

``pretrain(cfg, out)`` generates the world, trains (or reuses) a BPE tokenizer
on its full corpus, builds a tiny Llama and trains it with the one training
loop on the world's documents, optionally excluding splits (the *oracle*
never sees the forget facts; it shares the tokenizer of the full world so
that the two models are comparable token for token).

Results are cached by config hash under :func:`obliviate.utils.cache_dir`.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch

from obliviate.config import config_hash, to_dict
from obliviate.data import TokenDataset, collate, encode_documents
from obliviate.errors import ConfigError
from obliviate.losses import lm_loss
from obliviate.train import StepSampler, TrainConfig, train
from obliviate.utils import cache_dir, seed_everything
from obliviate.world import WorldConfig, generate_world


@dataclass
class ModelConfig:
    size: str = "tiny"
    """A named size from ``obliviate.models.builders.SIZES``."""
    n_layer: int | None = None
    d_model: int | None = None
    n_head: int | None = None
    d_ff: int | None = None
    vocab_size: int = 2048
    """BPE vocabulary size of the world tokenizer."""
    max_len: int = 256


def _default_pretrain_train() -> TrainConfig:
    return TrainConfig(steps=600, lr=3e-3, warmup_steps=30, schedule="cosine", min_lr_ratio=0.1,
                       weight_decay=0.0, grad_clip=1.0, log_every=20, desc="pretrain")


@dataclass
class PretrainConfig:
    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=_default_pretrain_train)
    batch_size: int = 32
    exclude_splits: list[str] = field(default_factory=list)
    """World splits left out of the corpus (``["forget"]`` trains the oracle)."""

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError(f"config key 'batch_size': must be >= 1, got {self.batch_size}")
        known = {"forget", "retain", "general", "concept", "holdout"}
        for s in self.exclude_splits:
            if s not in known:
                raise ConfigError(f"config key 'exclude_splits': unknown split {s!r} (known: {sorted(known)})")


def world_for(cfg: PretrainConfig):
    """The world of a run; its seed is the run seed unless set explicitly in ``world``."""
    return generate_world(cfg.world)


def tokenizer_for(world, vocab_size: int):
    """Train (or load from cache) the world tokenizer on the *full* corpus."""
    from obliviate.models.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer

    key = f"{world.fingerprint()[:16]}-{vocab_size}"
    path = cache_dir() / "tokenizers" / key
    if (path / "tokenizer.json").exists():
        return load_tokenizer(str(path))
    texts = [d["text"] for d in world.documents()]
    texts += [f["question_paraphrase"] + " " + f["answer_paraphrase"] for f in world.facts]
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
    from obliviate.models.builders import build_model

    kw = {k: v for k, v in to_dict(cfg.model).items() if k in ("n_layer", "d_model", "n_head", "d_ff") and v is not None}
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id)
    return build_model(cfg.model.size, vocab_size=len(tokenizer), seed=cfg.seed, max_len=cfg.model.max_len, **ids, **kw)


def make_lm_batches(dataset: TokenDataset, batch_size: int, seed: int, pad_id: int, weights_field: str | None = None):
    sampler = StepSampler(len(dataset), batch_size, seed)

    def batch_fn(step: int) -> dict:
        idx = sampler(step)
        return collate([dataset.input_ids[i] for i in idx], pad_id)

    return batch_fn


def pretrain(cfg: PretrainConfig, out_dir: str | Path, *, resume: bool = True, progress: bool | None = None) -> dict:
    """Train a tiny model on the world; save it (safetensors) and its tokenizer in ``out_dir/model``."""
    from obliviate.models.load import save_model

    out = Path(out_dir)
    seed_everything(cfg.seed)
    world = world_for(cfg)
    tok = tokenizer_for(world, cfg.model.vocab_size)
    docs = world.documents(exclude_splits=tuple(cfg.exclude_splits))
    dataset = encode_documents(tok, docs, max_len=cfg.model.max_len)
    seed_everything(cfg.seed)
    model = build_for(cfg, tok)
    tcfg = cfg.train
    if progress is not None:
        tcfg = TrainConfig(**{**to_dict(tcfg), "progress": progress})
    batch_fn = make_lm_batches(dataset, cfg.batch_size, cfg.seed, tok.pad_token_id)
    summary = train(model, lambda m, b, s: {"lm": lm_loss(m, b)}, batch_fn, tcfg, out, resume=resume)
    save_model(model, str(out / "model"))
    tok.save_pretrained(str(out / "model"))
    info = {"n_sequences": len(dataset), "n_tokens": dataset.n_tokens(), "steps": tcfg.steps,
            "final_loss": next((r["loss"] for r in reversed(summary["history"]) if "loss" in r), None)}
    (out / "pretrain.json").write_text(json.dumps(info, indent=2))
    return {"model_dir": out / "model", "world": world, "tokenizer": tok, "model": model, "dataset": dataset,
            "summary": summary, "info": info}


def cached_pretrain(cfg: PretrainConfig, progress: bool | None = None) -> Path:
    """Pretrain once per config (hash); return the directory holding ``model/``.

    A partially trained cache entry resumes from its last checkpoint; a
    finished one is reused as is.
    """
    key = config_hash(cfg)
    root = cache_dir() / "pretrain" / key
    if (root / "DONE").exists() and (root / "model" / "config.json").exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(to_dict(cfg), indent=2, sort_keys=True))
    cfg_ck = cfg
    if cfg.train.checkpoint_every == 0:
        cfg_ck = PretrainConfig(**{**cfg.__dict__, "train": TrainConfig(**{**to_dict(cfg.train), "checkpoint_every": 100})})
    pretrain(cfg_ck, root, resume=True, progress=progress)
    shutil.rmtree(root / "checkpoints", ignore_errors=True)
    (root / "DONE").write_text("ok\n")
    return root
