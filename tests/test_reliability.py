"""Faults: SIGKILL and resume of unlearning and attacks, full or unwritable disks, NaN/inf losses.

The pretraining kill-and-resume test is in tests/test_cli.py
(``test_pretrain_same_seed_same_metrics_and_resume_after_kill``); these follow the same recipe: a
run in a subprocess is SIGKILLed once a checkpoint exists, rerun into the same ``--out`` and must
end exactly like an uninterrupted run. The uninterrupted run and the resumed one run in this
process (saving two interpreter start-ups); all three use one torch thread.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from obliviate.cli.main import main

SMALL_WORLD = ["world.n_forget=3", "world.n_holdout=1", "world.n_retain=3", "world.n_general=3",
               "world.n_concept=2", "world.n_toxic=4"]
SMALL_PRETRAIN = SMALL_WORLD + ["model.size=nano", "model.vocab_size=400", "batch_size=4", "train.log_every=1",
                                 "qa_batch_size=8"]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A saved tiny random Llama (2 layers, d=32) and its tokenizer, trained on the small world's text."""
    from obliviate.models import save_model, tiny_llama, train_tokenizer
    from obliviate.world import WorldConfig, generate_world

    root = tmp_path_factory.mktemp("reliability") / "model"
    w = generate_world(WorldConfig(seed=0, n_forget=3, n_holdout=1, n_retain=3, n_general=3, n_concept=2, n_toxic=4))
    texts = [d["text"] for d in w.documents()] + [p["text"] for p in w.relearn_paragraphs]
    tok = train_tokenizer(texts, vocab_size=400)
    save_model(tiny_llama(len(tok), n_layer=2, d_model=32, n_head=2, seed=0), root)
    tok.save_pretrained(str(root))
    return root


def _steps_done(ckpt_dir: Path) -> int:
    if not ckpt_dir.is_dir():
        return 0
    done = [int(p.name[5:]) for p in ckpt_dir.iterdir()
            if p.name.startswith("step_") and (p / "trainer_state.json").exists()]
    return max(done, default=0)


def kill_after_checkpoint(args: list[str], ckpt_dir: Path, min_step: int, timeout: float = 300) -> None:
    """Run ``obliviate *args`` in a subprocess and SIGKILL it once ``ckpt_dir`` holds a checkpoint >= min_step."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "obliviate.cli.main", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None:
            if _steps_done(ckpt_dir) >= min_step:
                break
            time.sleep(0.02)
        if proc.poll() is not None:
            pytest.fail(f"the run ended (status {proc.returncode}) before it could be killed: "
                        f"{proc.stderr.read().decode()[-2000:]}")
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def _weights(model_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.heavy(6)
def test_unlearn_killed_after_a_checkpoint_resumes_to_the_same_result(tiny_model_dir, tmp_path, capsys):
    args = ["unlearn", "--base", str(tiny_model_dir), "--method", "npo", "--seed", "3", "--no-progress",
            *SMALL_WORLD, "unlearn.train.steps=40", "unlearn.train.checkpoint_every=5", "unlearn.train.log_every=1",
            "unlearn.batch_size=4", "unlearn.train.lr=3e-3"]
    ref = tmp_path / "ref"
    assert main([*args, "--out", str(ref)]) == 0

    killed = tmp_path / "killed"
    killed.mkdir()
    # An earlier, finished run left a results.json saying complete: the interrupted rerun must not keep it.
    from obliviate.runs.results import write_results

    write_results(killed, seed=3, config={}, metrics={"stale": 1.0})
    kill_after_checkpoint([*args, "--out", str(killed)], killed / "train" / "checkpoints", min_step=10)
    assert not (killed / "results.json").exists()
    assert not (killed / "model").exists()
    step_at_kill = _steps_done(killed / "train" / "checkpoints")
    assert 10 <= step_at_kill < 40

    capsys.readouterr()
    assert main([*args, "--out", str(killed)]) == 0
    assert "starting afresh" not in capsys.readouterr().err
    a, b = json.loads((ref / "results.json").read_text()), json.loads((killed / "results.json").read_text())
    assert b["status"] == "complete" and b["metrics"] == a["metrics"]
    assert a["metrics"]["npo"]["forget_qa_prob"] != a["metrics"]["base"]["forget_qa_prob"]  # training changed the model
    wa, wb = _weights(ref / "model"), _weights(killed / "model")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    la, lb = _jsonl(ref / "train" / "metrics.jsonl"), _jsonl(killed / "train" / "metrics.jsonl")
    assert [r["step"] for r in lb] == [r["step"] for r in la] == list(range(1, 41))
    assert lb == la  # every logged loss term, before and after the kill


def test_unlearn_does_not_resume_checkpoints_of_another_run(tiny_model_dir, tmp_path, capsys):
    """Checkpoints left in --out by a run with another config are not resumed (they would mix two runs)."""
    common = ["unlearn", "--base", str(tiny_model_dir), "--no-progress", "--out", str(tmp_path / "u"), *SMALL_WORLD,
              "unlearn.train.steps=6", "unlearn.train.checkpoint_every=2", "unlearn.batch_size=4"]
    assert main([*common, "--method", "npo"]) == 0
    assert _steps_done(tmp_path / "u" / "train" / "checkpoints") == 4  # the last checkpoint is kept
    capsys.readouterr()
    assert main([*common, "--method", "graddiff"]) == 0
    assert "starting afresh" in capsys.readouterr().err
    assert main([*common, "--method", "graddiff", "--out", str(tmp_path / "fresh")]) == 0
    m1 = json.loads((tmp_path / "u" / "results.json").read_text())["metrics"]
    m2 = json.loads((tmp_path / "fresh" / "results.json").read_text())["metrics"]
    assert m1 == m2


@pytest.mark.heavy(4)
def test_attack_killed_after_a_checkpoint_resumes_to_the_same_result(tiny_model_dir, tmp_path):
    args = ["attack", "--model", str(tiny_model_dir), "--seed", "2", "--no-progress", *SMALL_WORLD,
            "attacks.relearn.steps=40", "attacks.relearn.checkpoint_every=5", "attacks.relearn.eval_every=10",
            "attacks.relearn.batch_size=2", "attacks.lr_grid=[3e-3]", "attacks.lora=false",
            "attacks.relearn_disjoint=false"]
    ref = tmp_path / "ref"
    assert main([*args, "--out", str(ref)]) == 0

    killed = tmp_path / "killed"
    ckpts = killed / "relearn" / "corpus-lr0.003" / "checkpoints"
    kill_after_checkpoint([*args, "--out", str(killed)], ckpts, min_step=10)
    assert not (killed / "results.json").exists()
    assert 10 <= _steps_done(ckpts) < 40

    assert main([*args, "--out", str(killed)]) == 0
    a, b = json.loads((ref / "results.json").read_text()), json.loads((killed / "results.json").read_text())
    assert b["status"] == "complete" and b["metrics"] == a["metrics"]
    assert [c[0] for c in b["metrics"]["relearn_curve"]] == [0, 10, 20, 30, 40]  # the curve before the kill too
    la = _jsonl(ref / "relearn" / "corpus-lr0.003" / "metrics.jsonl")
    lb = _jsonl(killed / "relearn" / "corpus-lr0.003" / "metrics.jsonl")
    losses = [r["loss"] for r in la if "loss" in r]
    assert len(losses) == 40 and len(set(losses)) > 1
    assert lb == la  # the loss at every step and the accuracy at every evaluation


def test_relearn_attack_resumes_in_process(tmp_path):
    """relearn_attack itself: a run stopped after its step-4 checkpoint and rerun returns what a full run returns."""
    import obliviate.train.loop as loop
    from obliviate.attacks import RelearnConfig, relearn_attack
    from obliviate.models import tiny_llama, train_tokenizer

    texts = ["Zalosis was first recorded in Mousora.", "A physician wrote about Zalosis in 1898.",
             "Old archives in Mousora hold notes on Zalosis.", "Mousora is a quiet town by the sea."]
    tok = train_tokenizer(texts * 5, vocab_size=300)
    model = tiny_llama(len(tok), n_layer=1, d_model=16, n_head=2, seed=0)
    eval_fn = lambda m: float(m.model.embed_tokens.weight[5, 0].detach())  # any number that moves with training
    cfg = RelearnConfig(steps=8, eval_every=2, batch_size=2, checkpoint_every=4, lr=1e-2, seed=1)
    full = relearn_attack(model, tok, texts, eval_fn, cfg, out_dir=tmp_path / "full")

    class Stop(Exception):
        pass

    real_save = loop.save_checkpoint

    def save_then_stop(*a, **kw):
        real_save(*a, **kw)
        raise Stop

    loop.save_checkpoint = save_then_stop
    try:
        with pytest.raises(Stop):
            relearn_attack(model, tok, texts, eval_fn, cfg, out_dir=tmp_path / "run")
    finally:
        loop.save_checkpoint = real_save
    resumed = relearn_attack(model, tok, texts, eval_fn, cfg, out_dir=tmp_path / "run")
    assert resumed == full
    assert [c[0] for c in full["curve"]] == [0, 2, 4, 6, 8] and len(full["loss"]) == 8
    assert len({c[1] for c in full["curve"]}) > 1


# --------------------------------------------------------------------------- full or unwritable disks


def _one_error_line(err: str) -> str:
    """The one ``obliviate: error:`` line on stderr (progress bars of transformers may precede it), no traceback."""
    lines = [l for l in err.splitlines() if l.startswith("obliviate:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("obliviate: error: ")
    return lines[0]


def test_full_disk_when_writing_results_is_one_line_and_leaves_no_results(tmp_path, monkeypatch, capsys):
    import obliviate.runs.results as results

    out = tmp_path / "w"
    out.mkdir()
    results.write_results(out, seed=0, config={}, metrics={"old": 1})  # an earlier complete run

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(results.os, "fsync", no_space)
    rc = main(["world", "--out", str(out), *[w.split(".", 1)[1] for w in SMALL_WORLD]])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert "results.json" in line and str(out) in line and "No space left on device" in line
    assert not (out / "results.json").exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def test_full_disk_reported_by_safetensors_is_one_line(tmp_path, monkeypatch, capsys):
    """safetensors raises its own error type on a full disk, carrying 'os error 28'."""
    import safetensors.torch
    from safetensors import SafetensorError

    def st_full(*a, **kw):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", st_full)
    out = tmp_path / "p"
    rc = main(["pretrain", "--no-progress", "--out", str(out), *SMALL_PRETRAIN, "train.steps=4",
               "train.checkpoint_every=2"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "No space left on device (os error 28)" in line
    assert not (out / "results.json").exists()
    assert _steps_done(out / "checkpoints") == 0  # no half-written checkpoint counts as one


def _limit_file_size(limit: int):
    def preexec():
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


@pytest.mark.parametrize("limit,writer,message", [
    (100_000, "trainable.safetensors", "safetensors: Error while serializing: I/O error: File too large (os error 27)"),
    pytest.param(1_200_000, "state.pt", "torch.save could not write its file (disk full or file too large?)",
                 marks=pytest.mark.slow),  # the same path as the first, through the other writer
])
@pytest.mark.heavy(4)
def test_checkpoint_write_failure_mid_run_is_one_line(limit, writer, message, tmp_path):
    """A real write error in a subprocess: no file may grow past ``limit`` bytes (RLIMIT_FSIZE).

    The nano model's step-2 checkpoint holds ~0.9 MB of weights (trainable.safetensors) and ~1.9 MB of
    optimizer state (state.pt), so the first limit fails on the weights and the second on the state.
    """
    out = tmp_path / "p"
    args = [sys.executable, "-m", "obliviate.cli.main", "pretrain", "--no-progress", "--out", str(out), *SMALL_PRETRAIN,
            "train.steps=4", "train.checkpoint_every=2"]
    r = subprocess.run(args, preexec_fn=_limit_file_size(limit), capture_output=True, text=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1", "OBLIVIATE_CACHE": str(tmp_path / "cache")})
    line = _one_error_line(r.stderr)
    assert r.returncode == 2 and message in line, r.stderr
    assert not (out / "results.json").exists()
    assert _steps_done(out / "checkpoints") == 0
    # The failed checkpoint stays a temporary directory, which no resume reads (safetensors cleans up its own
    # temporary file; torch.save leaves a partial state.pt there).
    assert [p.name for p in (out / "checkpoints").iterdir()] == [".tmp_step_00000002"]
    assert (writer == "state.pt") == (out / "checkpoints" / ".tmp_step_00000002" / "state.pt").exists()


def test_unwritable_output_dir_is_one_line(tmp_path, monkeypatch, capsys):
    # A path below a regular file can never be created (also as root).
    f = tmp_path / "a_file"
    f.write_text("x")
    rc = main(["world", "--out", str(f / "run")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and line.endswith(f"{f / 'run'}: {f} is a file, not a directory"), line  # not "not writable"
    rc = main(["world", "--out", str(f)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and line.endswith(f"--out {f} is a file, not a directory"), line
    # A read-only file system (simulated: the writability probe fails with EROFS).
    real = Path.write_text

    def read_only(self, *a, **kw):
        if self.name.startswith(".write-probe"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", read_only)
    rc = main(["world", "--out", str(tmp_path / "ro")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2 and "ro is not writable: Read-only file system" in line
    assert not (tmp_path / "ro" / "results.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_read_only_output_dir_is_one_line(tmp_path, capsys):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        rc = main(["world", "--out", str(d)])
    finally:
        d.chmod(0o700)
    assert rc == 2 and "not writable" in _one_error_line(capsys.readouterr().err)


@pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="no /dev/full on this machine")
def test_dev_full_write_error_is_reported_by_name(capsys):
    from obliviate.cli.main import disk_error

    with pytest.raises(OSError) as e:
        with open("/dev/full", "w") as f:
            f.write("x" * 65536)
            f.flush()
    assert "No space left on device" in disk_error(e.value)


# --------------------------------------------------------------------------- NaN / inf losses


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_diverging_loss_stops_naming_step_and_term_and_keeps_the_last_good_checkpoint(bad, tmp_path, monkeypatch,
                                                                                      capsys):
    """The qa term turns bad at step 5: exit 2, one line naming 'qa' and step 5, the step-4 checkpoint kept."""
    import obliviate.train.pretrain as pretrain_mod
    from safetensors.torch import load_file

    real = pretrain_mod.lm_loss_grouped
    calls = {"n": 0}

    def qa_loss(m, batches):  # the qa term, once per step
        calls["n"] += 1
        loss = real(m, batches)
        return loss * bad if calls["n"] == 5 else loss

    monkeypatch.setattr(pretrain_mod, "lm_loss_grouped", qa_loss)
    out = tmp_path / "nan"
    rc = main(["pretrain", "--no-progress", "--out", str(out), *SMALL_PRETRAIN, "train.steps=8",
               "train.checkpoint_every=2", "train.keep_checkpoints=2"])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 2
    assert f"loss term 'qa' is {bad}" in line and "at step 5" in line and "step_00000004" in line
    assert not (out / "results.json").exists()
    kept = sorted(p.name for p in (out / "checkpoints").iterdir() if not p.name.startswith("."))
    assert kept == ["step_00000002", "step_00000004"]
    weights = load_file(str(out / "checkpoints" / "step_00000004" / "trainable.safetensors"))
    assert weights and all(torch.isfinite(t).all() for t in weights.values())
    assert [r["step"] for r in _jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4]  # logged up to the last good step
