"""Several processes: two CPU processes (gloo) against one process with the same global batch.

``_ddp_worker.py`` pretrains a nano model for 4 steps, resumes a copy of that run from its
step-2 checkpoint, unlearns with NPO and RMU for 3 steps each and runs a 3-step relearning
attack; the test runs it once in this process and once in two launched processes, then checks:

- both processes end with bit-identical weights (gradients were averaged), rank 0 alone
  wrote each ``metrics.jsonl`` (one line per step) and the resumed run repeats the last
  two steps bit for bit;
- the first logged NPO terms equal the mean of the per-shard values, computed here by hand
  on rows 0-1 and 2-3 of the global batch (so each process really trained on its half);
- every logged loss term matches the single-process run within ``rtol = 5e-3`` (plus
  ``atol = 1e-4`` for terms that start at 0, like RMU's retain MSE), and the grad norm within
  ``5e-2``. The difference is real, not noise: a term that is a mean over tokens (answer-only
  NLL, QA, masked MSE) is averaged per shard and then over the processes, which weights the
  shards equally instead of by their token counts (docs/distributed.md); seen here: <= 1e-3
  on the terms, <= 2e-2 on the grad norm. Row-mean terms with padding-free rows (the packed
  ``lm`` term at step 1, NPO's forget term) agree to float rounding.
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
RTOL, ATOL, GRAD_NORM_RTOL = 5e-3, 1e-4, 5e-2


def _worker():
    spec = importlib.util.spec_from_file_location("_ddp_worker", HERE / "_ddp_worker.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(worker module, single-process output dir, two-process output dir)."""
    root = tmp_path_factory.mktemp("ddp")
    worker = _worker()  # the launched processes inherit $OBLIVIATE_CACHE: they reuse this run's tokenizer
    worker.run(root / "single", resume_check=False)
    port = _free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
               "CUDA_VISIBLE_DEVICES": ""}
        procs.append(subprocess.Popen([sys.executable, str(HERE / "_ddp_worker.py"), str(root / "multi")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rank, (p, text) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{text[-3000:]}"
    return worker, root / "single", root / "multi"


def test_processes_stay_in_sync_and_only_rank0_writes(runs):
    worker, single, multi = runs
    ranks = [json.loads((multi / "ranks" / f"{r}.json").read_text()) for r in range(2)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["weights"] == ranks[1]["weights"]  # averaged gradients: identical steps everywhere
    for name, steps in worker.STEPS.items():  # one line per logged step (and evaluation): rank 1 wrote none
        two = _records(multi / name / "metrics.jsonl")
        assert [r["step"] for r in two if "loss" in r] == list(range(1, steps + 1)), name
        assert len(two) == len(_records(single / name / "metrics.jsonl")), name
    assert sorted(p.name for p in (multi / "pretrain" / "checkpoints").iterdir()) == ["step_00000002"]
    full, resumed = _records(multi / "pretrain" / "metrics.jsonl"), _records(multi / "resumed" / "metrics.jsonl")
    assert resumed == full[2:]
    from safetensors.torch import load_file

    a = load_file(str(multi / "pretrain" / "model" / "model.safetensors"))
    b = load_file(str(multi / "resumed" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_first_step_is_the_mean_of_the_shards(runs):
    """NPO's step-1 terms in two processes = mean over rows 0-1 and 2-3 of the terms, computed here."""
    from obliviate.methods import build_method
    from obliviate.pretrain import build_for, tokenizer_for, world_for
    from obliviate.tasks.world import forget_pairs, retain_pairs
    from obliviate.train.distributed import shard_rows
    from obliviate.executor import PairedQA, Reference

    worker, single, multi = runs
    cfg = worker._pretrain_cfg()
    world = world_for(cfg)
    tok = tokenizer_for(world, cfg.model.vocab_size)
    torch.manual_seed(0)
    model = build_for(cfg, tok)
    ref = Reference(model, shared=False)
    method = build_method("npo")
    batch = PairedQA(tok, forget_pairs(world), retain_pairs(world), worker.GLOBAL_BATCH, 0)(0)
    with torch.no_grad():
        shards = [method.loss(model, shard_rows(batch, r, 2), ref) for r in range(2)]
        whole = method.loss(model, batch, ref)
    got_multi = _records(multi / "npo" / "metrics.jsonl")[0]
    got_single = _records(single / "npo" / "metrics.jsonl")[0]
    for term in ("forget", "retain"):
        expected = float((shards[0][term] + shards[1][term]) / 2)
        assert got_multi[term] == pytest.approx(expected, rel=1e-6), term
        assert got_single[term] == pytest.approx(float(whole[term]), rel=1e-6), term
    # the retain NLL is a mean over answer tokens, and the two shards hold different token counts
    assert float(whole["retain"]) != pytest.approx(got_multi["retain"], rel=1e-7, abs=0)


@pytest.mark.parametrize("name", ["pretrain", "npo", "rmu", "relearn"])
def test_metrics_match_one_process_within_tolerance(runs, name):
    _, single, multi = runs
    one, two = _records(single / name / "metrics.jsonl"), _records(multi / name / "metrics.jsonl")
    assert [r["step"] for r in one] == [r["step"] for r in two]
    for a, b in zip(one, two):
        assert set(a) == set(b)
        assert a.get("lr") == b.get("lr")
        if "grad_norm" in a:
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=GRAD_NORM_RTOL)
        for key in set(a) - {"step", "lr", "grad_norm"}:  # loss terms (and the relearning curve, a loss)
            assert b[key] == pytest.approx(a[key], rel=RTOL, abs=ATOL), f"{name} step {a['step']} {key}"


# ------------------------------------------------------------------ without launching

def test_shard_rows_splits_every_row_tensor_and_list():
    from obliviate.errors import ConfigError
    from obliviate.train.distributed import shard_rows

    batch = {"forget": {"input_ids": torch.arange(10).view(5, 2), "topic": [0, 1, 2, 3, 4]},
             "retain": {"input_ids": torch.arange(4).view(4, 1)}, "scale": torch.tensor(2.0), "tag": "x"}
    first, second = shard_rows(batch, 0, 2), shard_rows(batch, 1, 2)
    assert first["forget"]["input_ids"].tolist() == [[0, 1], [2, 3]]  # rows [0, 5//2)
    assert second["forget"]["input_ids"].tolist() == [[4, 5], [6, 7], [8, 9]]  # rows [2, 5)
    assert first["forget"]["topic"] == [0, 1] and second["forget"]["topic"] == [2, 3, 4]
    assert first["retain"]["input_ids"].tolist() == [[0], [1]] and second["retain"]["input_ids"].tolist() == [[2], [3]]
    assert first["scale"] is batch["scale"] and second["tag"] == "x"
    assert shard_rows(batch, 0, 1) is batch
    with pytest.raises(ConfigError, match="3 rows cannot be split over 4 processes"):
        shard_rows({"x": torch.zeros(3, 2)}, 0, 4)


@pytest.mark.parametrize("flag,label", [("ACCELERATE_USE_FSDP", "FSDP"),
                                        ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed ZeRO")])
def test_methods_that_cannot_run_sharded_say_so_at_start(flag, label, monkeypatch, tiny_model, tiny_tokenizer):
    """The flags ``accelerate launch`` sets for an FSDP / DeepSpeed config: refused before any training."""
    from obliviate.errors import ConfigError, ObliviateError
    from obliviate.methods import build_method
    from obliviate.train import TrainConfig
    from obliviate.executor import UnlearnConfig, unlearn

    pairs = [("Question: What is Morvexia treated with?\nAnswer:", " zalpradine."),
             ("Question: Where does the glimmerfin live?\nAnswer:", " in cold caves.")]
    monkeypatch.setenv(flag, "true")
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    cfg = lambda method, **kw: UnlearnConfig(method=method, batch_size=2, train=TrainConfig(steps=1, progress=False),
                                             **kw)
    for method in ("rmu", "adaptive_rmu", "crisp", "probe_unlearn"):
        with pytest.raises(ObliviateError, match=rf"method '{method}' cannot run on a model sharded by {label}.*"
                                                 r"stops the forward pass"):
            unlearn(tiny_model, tiny_tokenizer, pairs[:1], pairs[1:], cfg(method))
    with pytest.raises(ConfigError, match="lora"):
        unlearn(tiny_model, tiny_tokenizer, pairs[:1], pairs[1:], cfg("npo", lora=True))
    for method in ("ember", "snmf"):  # edit methods: refused where they run
        with pytest.raises(ObliviateError, match=rf"method '{method}' cannot run on a model sharded by {label}: "
                                                 r"it edits weights in place"):
            build_method(method).edit(tiny_model, tiny_tokenizer, {"concept_sentences": ["a"],
                                                                   "neutral_sentences": ["b"]})
    assert all(torch.equal(p, before[n]) for n, p in tiny_model.named_parameters())  # nothing ran


def test_methods_with_per_process_state_refuse_several_processes(monkeypatch):
    """``WORLD_SIZE`` (set by every launcher) > 1: methods whose own state would differ per process say so."""
    from obliviate.errors import ObliviateError
    from obliviate.methods import build_method
    from obliviate.train.distributed import check_method

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ObliviateError, match=r"method 'atwu' cannot run in 2 processes: its token scorer"):
        check_method(build_method("atwu"))
    with pytest.raises(ObliviateError, match=r"method 'probe_unlearn' cannot run in 2 processes: without toxic_texts"):
        check_method(build_method("probe_unlearn"))
    with pytest.raises(ObliviateError, match=r"method 'crisp' cannot run in 2 processes: without target_texts"):
        check_method(build_method("crisp"))
    fitted = build_method("probe_unlearn")
    fitted.directions = {0: torch.ones(4)}  # probes fitted before training: nothing differs per process
    for ok in (build_method("npo"), build_method("rmu"), fitted, build_method("ember")):
        check_method(ok)
    monkeypatch.setenv("WORLD_SIZE", "1")
    check_method(build_method("atwu"))
