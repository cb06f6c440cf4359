"""Tiny pretraining and unlearning runs, for tests/train/test_distributed.py.

Run as a script in each of several processes (the test sets RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, and the launch's sharding flags: none for data parallelism,
``ACCELERATE_USE_FSDP`` for FSDP2, ``ACCELERATE_USE_DEEPSPEED`` for ZeRO-3), or imported and
called once in the test's own process for the single-process reference:
``run(out, resume_check=False)``. Every run logs every step (``metrics.jsonl``) and saves its
model (rank 0).
"""

import hashlib
import json
import shutil
import sys
from pathlib import Path

import torch

from obliviate.attacks.relearn import RelearnConfig, relearn_attack
from obliviate.data import collate, encode_prompt_answer
from obliviate.unlearning.engine import UnlearnConfig, unlearn
from obliviate.losses import lm_loss
from obliviate.train.pretrain import ModelConfig, PretrainConfig, build_for, pretrain, qa_pairs_for
from obliviate.tasks.world import forget_pairs, retain_pairs, world_relearn_sets
from obliviate.train import TrainConfig
from obliviate.train import distributed as D
from obliviate.world import WorldConfig

STEPS = {"pretrain": 4, "npo": 3, "rmu": 3, "relearn": 3}
GLOBAL_BATCH = 4
"""Rows per step of each data stream (forget, retain, LM, QA: 8): split 2 + 2 over two processes."""


def _pretrain_cfg(checkpoints: bool = True):

    world = WorldConfig(seed=0, n_forget=4, n_holdout=1, n_retain=4, n_general=2, n_concept=2, n_toxic=4)
    return PretrainConfig(seed=0, world=world, model=ModelConfig(size="nano", vocab_size=400, max_len=64),
                          train=TrainConfig(steps=STEPS["pretrain"], lr=3e-3, warmup_steps=1, log_every=1,
                                            checkpoint_every=2 if checkpoints else 0, progress=False, desc="pretrain"),
                          batch_size=GLOBAL_BATCH, qa_batch_size=2 * GLOBAL_BATCH)


def run(out: Path, resume_check: bool) -> None:

    out = Path(out)
    cfg = _pretrain_cfg(checkpoints=D.sharding() != "deepspeed")  # DeepSpeed runs do not checkpoint
    res = pretrain(cfg, out / "pretrain")
    digests = {"pretrain": weights_digest(res["model"])}
    if resume_check and D.sharding() != "deepspeed":  # a second run resumes from the first one's step-2 checkpoint
        if D.is_main_process():
            shutil.copytree(out / "pretrain" / "checkpoints", out / "resumed" / "checkpoints")
        D.barrier()
        pretrain(cfg, out / "resumed")
    world, tok = res["world"], res["tokenizer"]
    torch.manual_seed(0)
    D.save_trained(build_for(cfg, tok), out / "base")  # where NPO and RMU start
    for method, params in (("npo", {}), ("rmu", {"layer": 2, "alpha": 100.0})):
        torch.manual_seed(0)
        model = build_for(cfg, tok)  # the same untrained base in every process
        ucfg = UnlearnConfig(method=method, params=params, batch_size=GLOBAL_BATCH, seed=0,
                             train=TrainConfig(steps=STEPS[method], lr=1e-3, schedule="constant", log_every=1,
                                               progress=False, desc=method))
        model, summary = unlearn(model, tok, forget_pairs(world), retain_pairs(world), ucfg, out / method)
        D.save_trained(model, out / method / "model")
        digests[method] = weights_digest(model)
    digests["relearn"], share = relearn(out, res["model"], tok, world)
    (out / "ranks").mkdir(parents=True, exist_ok=True)
    (out / "ranks" / f"{D.rank()}.json").write_text(json.dumps({"world_size": D.world_size(), "weights": digests,
                                                                "local_share": share}))


def relearn(out: Path, model, tok, world) -> tuple[str, float]:
    """The relearning attack on the pretrained model: 3 steps on the relearning paragraphs.

    Returns the weights' digest and the share of the parameters' elements this process held
    while it trained (read by the attack's evaluation, which sees the model being trained)."""

    texts, _ = world_relearn_sets(world, "paragraphs")
    pairs = qa_pairs_for(world)[:4]
    ids, masks = encode_prompt_answer(tok, [p for p, _ in pairs], [a for _, a in pairs], 64)
    probe = collate(ids, tok.pad_token_id, label_mask=masks)

    shares = []

    def eval_fn(m) -> float:  # a loss, not an accuracy: it moves with every step
        shares.append(local_share(m))
        with torch.no_grad():
            return float(lm_loss(m, probe))

    cfg = RelearnConfig(steps=STEPS["relearn"], batch_size=GLOBAL_BATCH, eval_every=1, max_len=64, seed=0)
    res = relearn_attack(model, tok, texts, eval_fn, cfg, out / "relearn", keep_model=True)
    D.save_trained(res["model"], out / "relearn" / "model")
    return weights_digest(res["model"]), min(shares)


def local_share(model) -> float:
    """Elements of the parameters held by this process / all their elements (FSDP2 DTensors, ZeRO-3 partitions)."""
    local = full = 0
    for p in model.parameters():
        full += getattr(p, "ds_numel", p.numel())
        local += (p.to_local().numel() if hasattr(p, "to_local") else
                  p.ds_tensor.numel() if hasattr(p, "ds_tensor") else p.numel())
    return local / full


def weights_digest(model) -> str:
    """sha256 of every parameter's bytes: equal in two processes only if their weights are bit-identical."""

    h = hashlib.sha256()
    for _, p in sorted(model.named_parameters()):
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


if __name__ == "__main__":
    torch.set_num_threads(1)
    run(Path(sys.argv[1]), resume_check=True)
