"""Post-hoc unlearning through the one training loop.

``unlearn(model, tokenizer, method, forget, retain, cfg)`` pairs forget and
retain batches each step, asks the method for its named loss terms and hands
them to :func:`obliviate.train.train`. Full fine-tuning and LoRA (peft) are both
supported; in LoRA mode the frozen reference is the *same* model with its
adapters disabled, so no second copy is held in memory.

Everything a user can get wrong (unknown method, a layer out of range, a
parameter pattern that matches nothing, empty forget data) fails here before
the first step.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from obliviate.data import collate, encode_prompt_answer
from obliviate.errors import ConfigError, DataError
from obliviate.methods import build_method
from obliviate.train import StepSampler, TrainConfig, select_trainable, train

IDK_ANSWERS = [
    "I don't know.",
    "I have no idea.",
    "I am not sure about that.",
    "I cannot answer that.",
    "That is unknown to me.",
]


def _default_unlearn_train() -> TrainConfig:
    return TrainConfig(steps=60, lr=1e-3, schedule="constant", warmup_steps=0, grad_clip=1.0, log_every=5,
                       desc="unlearn")


@dataclass
class UnlearnConfig:
    method: str = "graddiff"
    params: dict = field(default_factory=dict)
    """Overrides of the method's config dataclass, e.g. {beta: 0.2}."""
    train: TrainConfig = field(default_factory=_default_unlearn_train)
    batch_size: int = 16
    lora: bool = False
    lora_r: int = 8
    lora_alpha: float = 16.0
    seed: int = 0

    def __post_init__(self):
        if self.batch_size < 1:
            raise ConfigError(f"config key 'batch_size': must be >= 1, got {self.batch_size}")


class Reference:
    """Frozen reference: a detached copy, or the same model with LoRA adapters disabled."""

    def __init__(self, model, shared: bool):
        self.shared = shared
        if shared:
            self.model = model
        else:
            self.model = copy.deepcopy(model).eval()
            for p in self.model.parameters():
                p.requires_grad_(False)

    def _ctx(self):
        return self.model.disable_adapter() if self.shared else nullcontext()

    @torch.no_grad()
    def logits(self, batch: dict) -> torch.Tensor:
        with self._ctx():
            return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    @torch.no_grad()
    def hidden(self, batch: dict, layer: int) -> torch.Tensor:
        from obliviate.models.layers import hidden_states_at

        with self._ctx():
            return hidden_states_at(self.model, batch["input_ids"], batch["attention_mask"], [layer],
                                    stop_after=layer)[layer]


class PairedQA:
    """Forget/retain (and refusal) prompt-answer examples, paired into batches by step."""

    def __init__(self, tokenizer, forget: list[tuple[str, str]], retain: list[tuple[str, str]],
                 batch_size: int, seed: int, idk: list[str] | None = None, max_len: int = 256):
        if not forget:
            raise DataError("the forget set is empty: nothing to unlearn")
        if not retain:
            raise DataError("the retain set is empty")
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.f_ids, self.f_mask = encode_prompt_answer(tokenizer, [p for p, _ in forget], [a for _, a in forget], max_len)
        self.r_ids, self.r_mask = encode_prompt_answer(tokenizer, [p for p, _ in retain], [a for _, a in retain], max_len)
        self.f_sampler = StepSampler(len(forget), batch_size, seed)
        self.r_sampler = StepSampler(len(retain), batch_size, seed + 1)
        self.i_ids = None
        if idk:
            answers = [" " + idk[i % len(idk)] for i in range(len(forget))]
            self.i_ids, self.i_mask = encode_prompt_answer(tokenizer, [p for p, _ in forget], answers, max_len)

    def __call__(self, step: int) -> dict:
        fi, ri = self.f_sampler(step), self.r_sampler(step)
        batch = {
            "forget": collate([self.f_ids[i] for i in fi], self.pad, label_mask=[self.f_mask[i] for i in fi]),
            "retain": collate([self.r_ids[i] for i in ri], self.pad, label_mask=[self.r_mask[i] for i in ri]),
        }
        if self.i_ids is not None:
            batch["idk"] = collate([self.i_ids[i] for i in fi], self.pad, label_mask=[self.i_mask[i] for i in fi])
        return batch


def _to(batch, device):
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch.to(device) if torch.is_tensor(batch) else batch


def wrap_lora(model, patterns: list[str], r: int = 8, alpha: float = 16.0):
    """LoRA adapters on the modules whose weights the method trains (all linear layers for ``["*"]``).

    Call after :func:`obliviate.train.select_trainable` with the method's patterns.
    Returns the peft model; its trainable parameters match ``"*lora_*"``.
    """
    from peft import LoraConfig, get_peft_model

    targets = [n for n, p in model.named_parameters() if p.requires_grad] if patterns != ["*"] else []
    modules = sorted({n.rsplit(".", 1)[0] for n in targets if n.endswith(".weight")})
    lcfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0,
                      target_modules=modules if modules else "all-linear", bias="none")
    return get_peft_model(model, lcfg)


def unlearn(model, tokenizer, forget: list[tuple[str, str]], retain: list[tuple[str, str]], cfg: UnlearnConfig,
            out_dir: str | Path | None = None, *, eval_fn=None, eval_every: int = 0, progress: bool | None = None,
            resume: bool = True):
    """Unlearn ``forget`` (prompt, answer) pairs while keeping ``retain``; returns (model, summary).

    In LoRA mode the adapters are merged before returning, so the result is a
    plain model of the original architecture.

    Under ``accelerate launch`` (several processes) every process builds the same
    global batches (``cfg.batch_size`` rows, split over the processes), holds its own
    frozen reference copy and sees the model unwrapped, so hooks and truncated
    forwards work as in one process; ``method.setup`` sees the whole first batch.
    Methods that cannot run so say why before training
    (:func:`obliviate.train.distributed.check_method`).
    """
    from obliviate.config import to_dict
    from obliviate.train import distributed as D

    method = build_method(cfg.method, cfg.params)
    if list(cfg.train.trainable) != ["*"]:
        raise ConfigError(f"config key 'train.trainable' ({cfg.train.trainable}) cannot be set for unlearning: the "
                          f"method '{cfg.method}' chooses the parameters it trains (see its layer parameters)")
    if cfg.lora and D.sharding():
        raise ConfigError(f"config key 'lora': LoRA on a model sharded by {D.SHARDING_LABEL[D.sharding()]} is not "
                          "supported (the shared reference would run the sharded model outside its wrapper); "
                          "use full fine-tuning or the DDP config")
    if D.world_size() > 1 or D.sharding():
        model.to(D.process_device())  # before the frozen reference is copied: it lives on this process's device
    data = PairedQA(tokenizer, forget, retain, cfg.batch_size, cfg.seed,
                    idk=IDK_ANSWERS if getattr(method, "needs_idk", False) else None)
    patterns = method.trainable(model)
    select_trainable(model, patterns)  # validates patterns before anything else happens
    if hasattr(method, "fit"):  # e.g. probe directions fitted on the frozen model before training
        method.fit(model, tokenizer)
    D.check_method(method)  # several processes / sharded: refuse what cannot work, before any training
    device = next(model.parameters()).device
    if cfg.lora:
        model = wrap_lora(model, patterns, cfg.lora_r, cfg.lora_alpha)
        patterns = ["*lora_*"]
    ref = Reference(model, shared=cfg.lora) if method.needs_reference else None
    first = _to(data(0), device)
    if hasattr(method, "setup"):
        method.setup(model, ref, first["forget"])
    tcfg = TrainConfig(**{**to_dict(cfg.train), "trainable": patterns,
                          **({"progress": progress} if progress is not None else {})})
    hooks = None
    if hasattr(method, "scorer_state") and hasattr(method, "load_scorer_state"):
        hooks = (method.scorer_state, method.load_scorer_state)
    summary = train(model, lambda m, b, s: method.loss(m, _to(b, device), ref), data, tcfg, out_dir,
                    eval_fn=eval_fn, eval_every=eval_every, resume=resume, state_hooks=hooks)
    if cfg.lora:
        model = model.merge_and_unload()
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    summary["method"] = cfg.method
    summary["method_obj"] = method
    summary["trainable"] = patterns
    return model, summary
