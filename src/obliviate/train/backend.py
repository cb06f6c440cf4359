"""Where the training loop's model lives: one process, data parallel, FSDP2 or DeepSpeed ZeRO-3.

The loop (:func:`obliviate.train.train`) asks a backend to ``prepare``, ``local``, ``mean``,
``backward`` + ``clip`` and ``finish`` and never branches on the launch itself. :class:`Single`,
:class:`DataParallel` (gradients averaged by hand), :class:`FSDP2` (torch's ``fully_shard``, on
every platform) and :class:`DeepSpeed` (ZeRO-3 through ``Accelerator.prepare``); :func:`backend_for`
picks one from the launch. See docs/distributed.md.
"""

from __future__ import annotations

import contextlib
import copy

import torch

from obliviate.errors import ConfigError
from obliviate.losses import token_means_over_processes
from obliviate.models.layers import decoder_layers, unwrap
from obliviate.train import distributed as D


def make_accelerator():
    """The ``Accelerator`` of a training run: on the CPU unless CUDA is there; for DeepSpeed, its plugin from
    the launch's environment (``accelerate launch`` config, or ``ACCELERATE_DEEPSPEED_*``) and, on CPUs, the
    gloo backend (without it every process believes it is rank 0 of 1)."""
    import importlib.util

    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    D.check_launch()  # a sharded launch of one process: refused before accelerate looks at the plugin
    cuda = torch.cuda.is_available()
    if D.sharding() == "deepspeed":
        if importlib.util.find_spec("deepspeed") is None:
            raise ConfigError(f"{D.SHARDING_ENV['deepspeed']} asks for DeepSpeed, but deepspeed is not "
                              "installed (pip install deepspeed; see docs/distributed.md)")
        return Accelerator(kwargs_handlers=[] if cuda else [InitProcessGroupKwargs(backend="gloo")])
    return Accelerator(cpu=not cuda)


def backend_for(accelerator, grad_clip: float = 1.0) -> "Backend":
    """The backend of this launch: the sharding the environment asks for
    (:func:`~obliviate.train.distributed.sharding`), else data parallel in several processes, else one
    process."""
    D.check_launch()
    mode = D.sharding()
    if mode == "deepspeed":
        return DeepSpeed(accelerator, grad_clip)
    if mode == "fsdp":
        return FSDP2(accelerator)
    return DataParallel(accelerator) if accelerator.num_processes > 1 else Single(accelerator)


def can_checkpoint() -> bool:
    """Whether the training loop can checkpoint in this launch (known before any model or Accelerator
    exists)."""
    return SHARDED.get(D.sharding(), Backend).checkpoints


class Backend:
    """What every backend shares; on its own it is :class:`Single`'s behaviour."""

    name = "single"

    def __init__(self, accelerator):
        self.acc = accelerator
        self.world, self.rank = accelerator.num_processes, accelerator.process_index

    # -- set-up
    checkpoints = True
    """Whether the loop can checkpoint this backend's runs."""

    def prepare(self, model, extra, make_optimizer, batch_fn):
        """``(model to train, optimizer, trained tensors)``: ``make_optimizer(tensors)`` builds the optimizer
        over the model's trainable parameters and ``extra`` (trained tensors outside the model)."""
        params = trainable_tensors(model, extra)
        model, optimizer = self.acc.prepare(model, make_optimizer(params))
        return model, optimizer, params

    # -- every step
    def local(self, batch):
        return batch

    def loss_context(self):
        return contextlib.nullcontext()  # Accelerator.prepare wrapped the forward already

    def mean(self, terms: dict[str, torch.Tensor], total: torch.Tensor) -> dict[str, float] | None:
        """The mean over processes of each term and of ``"loss"`` (in one process: their values)."""
        if self.world == 1:
            return {n: float(v.detach()) for n, v in terms.items()} | {"loss": float(total.detach())}
        names = list(terms)
        means = D.all_reduce_mean(torch.stack([terms[n].detach().float().reshape(()) for n in names]
                                              + [total.detach().float().reshape(())]))
        return dict(zip(names + ["loss"], means.tolist()))

    def backward(self, total: torch.Tensor, params) -> None:
        self.acc.backward(total)

    def clip(self, params, max_norm: float) -> float | None:
        """Clip to ``max_norm`` (inf: only measure); the global grad norm, or None where the backend clips
        itself."""
        norm = self.acc.clip_grad_norm_(params, max_norm)
        return None if norm is None else float(norm)

    def any(self, flag: bool) -> bool:
        """True if ``flag`` holds in any process."""
        if self.world == 1:
            return flag
        return float(D.all_reduce_mean(torch.tensor([float(flag)], device=self.acc.device))) > 0

    # -- checkpoints
    def weights(self, model) -> dict[str, torch.Tensor]:
        """Full tensors of the trained parameters (a collective when sharded; rank 0 writes them)."""
        return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def optimizer_state(self, model, optimizer) -> dict:
        return optimizer.state_dict()

    def load_optimizer_state(self, model, optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)

    # -- the end
    def finish(self, original, model) -> None:
        """Leave the trained weights in ``original``, the plain model the caller passed (in every process)."""


class Single(Backend):
    """One process: accelerate places the model; nothing is split."""


class DataParallel(Backend):
    """Several processes, each with the whole (unwrapped) model; gradients averaged by hand after backward."""

    name = "ddp"

    def prepare(self, model, extra, make_optimizer, batch_fn):
        model.to(self.acc.device)
        params = trainable_tensors(model, extra)
        optimizer = self.acc.prepare(make_optimizer(params))
        D.broadcast_from_main([*model.parameters(), *model.buffers(), *(extra or [])])
        return model, optimizer, params

    def local(self, batch):
        return D.to_device(D.shard_rows(batch, self.rank, self.world), self.acc.device)

    def loss_context(self):
        stack = contextlib.ExitStack()
        stack.enter_context(self.acc.autocast())
        stack.enter_context(token_means_over_processes(D.all_reduce_mean))  # token means of the global batch
        return stack

    def backward(self, total, params) -> None:
        self.acc.backward(total)
        D.average_gradients(params)


class _Sharded(DataParallel):
    """Trains a deep copy of the caller's model, sharded; :meth:`finish` gathers it back."""

    def finish(self, original, model) -> None:
        full = self.gather(model)
        named = dict(original.named_parameters())
        with torch.no_grad():
            for n, t in full.items():
                if n in named:
                    named[n].copy_(t.to(named[n].device, named[n].dtype))

    def weights(self, model) -> dict[str, torch.Tensor]:
        trained = {n for n, p in self._named(model) if p.requires_grad}
        return {n: t for n, t in self.gather(model).items() if n in trained}


class FSDP2(_Sharded):
    """torch FSDP2: ``fully_shard`` on each decoder layer, then on the root (embeddings, final norm, head)."""

    name = "fsdp"

    def prepare(self, model, extra, make_optimizer, batch_fn):
        from torch.distributed.fsdp import fully_shard

        _no_extra(extra, self)
        work = copy.deepcopy(model).to(self.acc.device)
        D.broadcast_from_main([*work.parameters(), *work.buffers()])
        for layer in decoder_layers(work):
            fully_shard(layer)
        # the Hugging Face model, inside any peft wrapper: its forward gathers the root
        fully_shard(unwrap(work))
        params = trainable_tensors(work, None)
        return work, make_optimizer(params), params

    def backward(self, total, params) -> None:
        total.backward()  # FSDP reduce-scatters (averages) each layer's gradients during backward

    def clip(self, params, max_norm: float) -> float:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def _named(self, model):
        return model.named_parameters()

    def gather(self, model) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))

    def optimizer_state(self, model, optimizer) -> dict:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))

    def load_optimizer_state(self, model, optimizer, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


class DeepSpeed(_Sharded):
    """DeepSpeed ZeRO (stage from the accelerate config / ``ACCELERATE_DEEPSPEED_ZERO_STAGE``) via
    accelerate."""

    name = "deepspeed"

    checkpoints = False
    NO_CHECKPOINTS = ("checkpoints of a DeepSpeed run are not supported (its optimizer state is partitioned "
                      "its own way); set train.checkpoint_every=0, or shard with FSDP2 "
                      "(ACCELERATE_USE_FSDP=true)")

    def __init__(self, accelerator, grad_clip: float):
        super().__init__(accelerator)
        if accelerator.state.deepspeed_plugin is None:
            raise ConfigError("ACCELERATE_USE_DEEPSPEED asks for DeepSpeed, but the Accelerator has no "
                              "DeepSpeed plugin (build it with obliviate.train.backend.make_accelerator)")
        self.grad_clip = grad_clip

    def prepare(self, model, extra, make_optimizer, batch_fn):
        _no_extra(extra, self)
        ds = self.acc.state.deepspeed_plugin.deepspeed_config
        ds["gradient_clipping"] = self.grad_clip  # accelerate would fill in 1.0
        if ds.get("train_micro_batch_size_per_gpu") in (None, "auto"):
            rows = [len(v) for v in _leaves(batch_fn(0)) if torch.is_tensor(v) and v.dim() > 0]
            ds["train_micro_batch_size_per_gpu"] = max(1, (max(rows) if rows else 1) // self.world)
            ds["train_batch_size"] = ds["train_micro_batch_size_per_gpu"] * self.world
        ds.setdefault("zero_allow_untested_optimizer", True)  # the torch AdamW: no C++ op to build
        work = copy.deepcopy(model)
        engine, optimizer = self.acc.prepare(work, make_optimizer(trainable_tensors(work, None)))
        self.engine = engine  # its step (inside the backward) measures the grad norm
        return engine, optimizer, trainable_tensors(engine.module, None)

    def clip(self, params, max_norm: float) -> float | None:
        norm = self.engine.get_global_grad_norm() if hasattr(self.engine, "get_global_grad_norm") else None
        return None if norm is None else float(norm)  # DeepSpeed clips inside its step (gradient_clipping)

    def _named(self, model):
        return model.module.named_parameters()

    def gather(self, model) -> dict[str, torch.Tensor]:
        import deepspeed

        named = list(model.module.named_parameters())
        with deepspeed.zero.GatheredParameters([p for _, p in named], modifier_rank=None):
            return {n: p.detach().clone() for n, p in named}


def trainable_tensors(model, extra=None) -> list[torch.Tensor]:
    """The model's trainable parameters, then ``extra`` (trained tensors outside the model)."""
    return [p for p in model.parameters() if p.requires_grad] + list(extra or [])


def _no_extra(extra, backend) -> None:
    if extra:
        raise ConfigError(f"trained tensors outside the model (a method's own scorer) cannot be sharded by "
                          f"{backend.name}; run in one process or with data parallelism")


def _leaves(batch):
    if isinstance(batch, dict):
        for v in batch.values():
            yield from _leaves(v)
    else:
        yield batch


SHARDED: dict[str, type[Backend]] = {"fsdp": FSDP2, "deepspeed": DeepSpeed}
"""The backend of each sharding mode (:func:`~obliviate.train.distributed.sharding`)."""
