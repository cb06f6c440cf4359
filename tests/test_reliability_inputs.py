"""Issue #16: config values out of range, seeds, duplicate JSON keys, a locked --out, weights that overflow.

Each test fails if the behaviour it names comes back; docs/bad-input.md lists them next to the error each
input gets. (YAML files are in tests/test_config.py, model files and paths in tests/models/test_models_load.py.)
"""

import math
import os
import subprocess
import sys

import pytest
import torch

from _cli_errors import SMALL_WORLD, one_error
from obliviate.tasks.sources._io import iter_jsonl, parse_json, read_json
from obliviate.cli.main import main
from obliviate.errors import ConfigError, DataError, ObliviateError
from obliviate.runs.results import LOCK_NAME, prepare_out_dir
from obliviate.train import TrainConfig, TrainingDiverged, train
from obliviate.utils import seed_everything

# --------------------------------------------------------------------------- 1. finite, in-range values


@pytest.mark.parametrize("key,value,message", [
    ("lr", math.nan, "must be a finite number, got nan"),
    ("lr", math.inf, "must be a finite number, got inf"),
    ("lr", 0.0, "must be > 0, got 0.0"),
    ("weight_decay", -0.1, "must be >= 0, got -0.1"),
    ("weight_decay", math.inf, "must be a finite number, got inf"),
    ("beta1", 1.0, "must be in [0, 1), got 1.0"),
    ("beta2", -0.5, "must be in [0, 1), got -0.5"),
    ("beta2", math.nan, "must be a finite number, got nan"),
    ("min_lr_ratio", 1.5, "must be in [0, 1], got 1.5"),
    ("grad_clip", -1.0, "must be >= 0 (0 disables clipping), got -1.0"),
    ("grad_clip", math.inf, "must be a finite number, got inf"),
    ("warmup_steps", -1, "must be >= 0, got -1"),
    ("keep_checkpoints", 0, "must be >= 1, got 0"),
])
def test_train_config_values_must_be_finite_and_in_range(key, value, message):
    with pytest.raises(ConfigError) as e:
        TrainConfig(**{key: value})
    assert str(e.value) == f"config key '{key}': {message}"


def test_train_config_edges_that_are_allowed():
    TrainConfig(beta1=0.0, beta2=0.0, min_lr_ratio=0.0, grad_clip=0.0, weight_decay=0.0, warmup_steps=0)
    TrainConfig(min_lr_ratio=1.0, beta2=0.999999)


def test_non_finite_lr_at_the_command_line_is_one_line(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["pretrain", "--out", str(out), *SMALL_WORLD, "train.lr=.nan"]) == 2
    assert one_error(capsys) == "obliviate: error: config key 'train.lr': must be a finite number, got nan"
    assert not (out / "results.json").exists()


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64, True, 1.5])
def test_seed_everything_refuses_seeds_outside_the_range(seed):
    with pytest.raises(ConfigError, match=r"^seed must be an integer in \[0, 2\*\*32\)"):
        seed_everything(seed)


def test_seed_everything_takes_the_whole_range():
    seed_everything(0)
    seed_everything(2**32 - 1)


@pytest.mark.parametrize("seed", ["-1", "4294967296", "1" * 5000, "abc", "1.5"])
def test_bad_seed_at_the_command_line_fails_before_anything_runs(seed, tmp_path, capsys):
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as e:
        main(["world", "--out", str(out), "--seed", seed])
    assert e.value.code == 2
    err = capsys.readouterr().err
    line = [l for l in err.splitlines() if "error:" in l]
    assert len(line) == 1 and "Traceback" not in err and len(line[0]) < 250, err
    assert "argument --seed: expected an integer in [0, 2**32)" in line[0]
    assert not out.exists()  # nothing ran: not even the output directory was made


def test_largest_seed_runs(tmp_path):
    assert main(["world", "--out", str(tmp_path / "o"), "--seed", str(2**32 - 1), *[w.split(".", 1)[1]
                                                                                  for w in SMALL_WORLD]]) == 0


# --------------------------------------------------------------------------- 2. duplicate keys in JSON files


def test_duplicate_json_keys_are_refused_naming_file_and_line(tmp_path):
    f = tmp_path / "qa.json"
    f.write_text('[\n {"question": "q1", "answer": "a"},\n {"question": "q2",\n  "answer": "b",\n  "answer": "c"}\n]\n')
    with pytest.raises(DataError, match=r"^qa.json line 5: duplicate key 'answer' in one JSON object$"):
        read_json(f, "qa.json")
    lines = tmp_path / "qa.jsonl"
    lines.write_text('{"question": "q1", "answer": "a"}\n\n{"question": "q2", "question": "q3", "answer": "b"}\n')
    with pytest.raises(DataError, match=r"^qa.jsonl line 3: duplicate key 'question' in one JSON object$"):
        list(iter_jsonl(lines, "qa.jsonl"))
    # the same key in different objects, or nested, is fine
    assert parse_json('{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}', "x") == {"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}


def test_duplicate_key_in_an_eval_data_file_at_the_command_line(tmp_path, capsys):
    from obliviate.models import save_model, tiny_llama, train_tokenizer

    model = tmp_path / "model"
    tok = train_tokenizer(["the quick brown fox jumps over the lazy dog"] * 20, vocab_size=300)
    save_model(tiny_llama(len(tok), n_layer=1, d_model=32, n_head=2), model)
    tok.save_pretrained(str(model))
    data = tmp_path / "dup.jsonl"
    data.write_text('{"question": "q?", "answer": "a"}\n{"question": "q?", "answer": "a", "answer": "b"}\n')
    out = tmp_path / "o"
    assert main(["eval", "--out", str(out), "--model", str(model), "--data", str(data), "--kind", "qa"]) == 2
    assert "dup.jsonl line 2: duplicate key 'answer' in one JSON object" in one_error(capsys)
    assert not (out / "results.json").exists()


# --------------------------------------------------------------------------- 3. --out locked for the run


HOLD = ("import sys, time\n"
        "from obliviate.runs.results import prepare_out_dir\n"
        "prepare_out_dir(sys.argv[1])\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n")


@pytest.fixture
def held_dir(tmp_path):
    """(directory, pid) of a directory that another process has prepared and still runs in."""
    d = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(d)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield d, proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_second_process_cannot_prepare_a_directory_in_use(held_dir, capsys, monkeypatch):
    d, pid = held_dir
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with pytest.raises(ObliviateError) as e:
        prepare_out_dir(d)
    assert str(e.value) == (f"output directory {d} is in use by another obliviate run (pid {pid}); wait for it "
                            "to finish, or choose another --out")
    assert main(["world", "--out", str(d)]) == 2
    assert f"output directory {d} is in use by another obliviate run (pid {pid})" in one_error(capsys)


def test_the_lock_goes_with_the_process(held_dir, monkeypatch):
    d, pid = held_dir
    monkeypatch.delenv("RANK", raising=False)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert prepare_out_dir(d) == d
    assert (d / LOCK_NAME).read_text().strip() == str(os.getpid())


def test_one_process_may_prepare_its_directory_again(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    d = tmp_path / "run"
    prepare_out_dir(d)
    (d / "results.json").write_text("{}")
    prepare_out_dir(d)  # re-entrant: no deadlock, no error
    assert not (d / "results.json").exists()
    prepare_out_dir(tmp_path / "." / "run")  # the same directory by another name


@pytest.mark.parametrize("var", ["RANK", "LOCAL_RANK"])
def test_other_ranks_of_one_run_are_not_blocked(var, held_dir, monkeypatch):
    """Under torchrun / accelerate launch rank 0 holds the lock; the other ranks prepare the same directory."""
    d, _ = held_dir
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv(var, "1")
    assert prepare_out_dir(d) == d


# --------------------------------------------------------------------------- 4. weights that overflow


def _tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32))


def _batch(step):
    ids = torch.arange(16).remainder(50).view(2, 8)
    return {"input_ids": ids, "labels": ids}


class Pair(torch.nn.Module):
    """Two weights under a bounded loss: ``tanh`` of ``a``, and ``b`` with gradient 0 (moved by weight decay only)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.ones(3))
        self.b = torch.nn.Parameter(torch.ones(3))


def _bounded_loss(m, batch, step):
    return {"fit": torch.tanh(m.a).sum() + 0 * m.b.sum()}


def test_weights_that_overflow_in_the_last_step_are_training_diverged(tmp_path):
    """lr * weight_decay = 1e20 multiplies the weights by about -1e20 a step: 1e20, then inf, while every loss
    and gradient stays finite; the end of training names the first such tensor and the lr instead of returning."""
    cfg = TrainConfig(steps=2, lr=1e10, weight_decay=1e10, schedule="constant", grad_clip=0.0, progress=False)
    with pytest.raises(TrainingDiverged, match=r"^parameter 'a' holds NaN or infinite values after step 2 "
                                               r"\(lr=1e\+10 too large\?\); the trained weights are not usable$"):
        train(Pair(), _bounded_loss, lambda step: {}, cfg, tmp_path / "t")
    sane = Pair()
    train(sane, _bounded_loss, lambda step: {}, TrainConfig(steps=2, lr=1e-2, weight_decay=0.1, progress=False))
    assert torch.isfinite(sane.b).all()


def test_an_lr_too_large_for_the_optimizer_step_is_training_diverged():
    """torch refuses a step size beyond float32 (RuntimeError "... without overflow"): one line instead."""
    cfg = TrainConfig(steps=1, lr=1e39, grad_clip=0.0, progress=False)
    with pytest.raises(TrainingDiverged, match=r"^the optimizer step at step 1 overflows the parameters' dtype "
                                               r"\(lr=1e\+39 too large\?\)$"):
        train(_tiny(), lambda m, b, s: {"lm": m(**b).loss}, _batch, cfg)


def test_a_pretraining_run_whose_weights_overflow_is_not_complete(tmp_path, capsys, monkeypatch):
    """lr=1e20 with weight decay 1e19 scales every weight by -1e39 (inf in float32) in the one step."""
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "p"
    assert main(["pretrain", "--out", str(out), "--no-progress", *SMALL_WORLD, "model.size=nano",
                 "model.vocab_size=400", "batch_size=4", "qa_batch_size=8", "train.steps=1", "train.lr=1e20",
                 "train.weight_decay=1e19", "train.warmup_steps=0"]) == 2
    assert "holds NaN or infinite values after step 1 (lr=1e+20 too large?)" in one_error(capsys)
    assert not (out / "results.json").exists() and not (out / "model").exists()
