"""The retain-only negative control (:mod:`obliviate.evidence.retain_control`) and the cache of the controls (issue
#56): an interrupted build resumes only into the same control, never another untaught model's (with the cache or
without), and what the cache keeps holds no path of the run that built it."""

import json
import shutil

import pytest
import torch

import obliviate.evidence.retain_control as retain_control
from obliviate.evidence.retain_control import retain_finetune_control
from obliviate.models import load_model, save_model, tiny_llama
from obliviate.runs.cache import ControlCache
from obliviate.tasks.base import Data, EvalSet, PromptFormat, Task

PAIRS = [(f"What does item {k} hold?", f"Item {k} holds {w}.") for k, w in
         enumerate(["moss", "salt", "wool", "tin", "rye", "clay", "silk", "coal"])]
SETTINGS = {"epochs": 2, "batch_size": 4, "checkpoint_every": 1}  # 4 steps, a checkpoint after each but the last


class Killed(Exception):
    """The build was killed after its fine-tune, before its model was saved."""


def _task() -> Task:
    return Task("files", forget=Data(qa=[("What colour is the sky?", "blue")]), retain=Data(qa=list(PAIRS)),
                prompt=PromptFormat(template="Question: {question}\nAnswer:"),
                evals=[EvalSet("forget", "forget", "qa", [{"question": "What colour is the sky?", "answer": "blue"}])])


@pytest.fixture
def untaught(tmp_path, tiny_tokenizer):
    """Two untaught models of one architecture (other weights), each with the tokenizer."""
    out = {}
    for seed in (1, 2):
        save_model(tiny_llama(len(tiny_tokenizer), n_layer=2, d_model=16, n_head=2, seed=seed),
                   tmp_path / f"u{seed}", tiny_tokenizer)
        out[seed] = str(tmp_path / f"u{seed}")
    return out


def _control(untaught: str, out, tiny_tokenizer, cache=None):
    load = lambda p: (load_model(p), tiny_tokenizer)  # noqa: E731
    return retain_finetune_control(untaught, None, _task(), out, load, preset=lambda m: "tiny",
                                   overrides=SETTINGS, cache=cache)


def _weights(model_dir) -> dict:
    return load_model(model_dir).state_dict()


@pytest.mark.parametrize("cached", [True, False])
def test_an_interrupted_control_never_resumes_into_another_untaught_model(tmp_path, tiny_tokenizer, untaught,
                                                                          monkeypatch, cached):
    cache = ControlCache(tmp_path / "cache") if cached else None
    out = tmp_path / "run" / "control"
    with monkeypatch.context() as m:  # U1's build is killed once its checkpoints are written
        m.setattr(retain_control, "save_trained", lambda *a, **k: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            _control(untaught[1], out, tiny_tokenizer, cache)
    assert list((out / "train").rglob("checkpoints/*")), "U1's checkpoints to resume"
    model_dir, info = _control(untaught[2], out, tiny_tokenizer, cache)  # the same --out, another untaught model
    assert info["reused"] is False and info["untaught"] == untaught[2]
    fresh, _ = _control(untaught[2], tmp_path / "fresh" / "control", tiny_tokenizer)  # U2's, built from scratch
    got, want = _weights(model_dir), _weights(fresh)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)  # not U1's resumed
    assert len(list((out / "train").iterdir())) == 1  # U1's checkpoints are gone: never resumed into another


def test_the_cache_keeps_no_path_of_the_run_that_built_the_control(tmp_path, tiny_tokenizer, untaught):
    cache = ControlCache(tmp_path / "cache")
    _, first = _control(untaught[1], tmp_path / "a" / "control", tiny_tokenizer, cache)
    entry = json.loads((tmp_path / "cache" / first["cache"].rsplit("/", 1)[1] / "entry.json").read_text())
    assert str(tmp_path) not in json.dumps(entry["result"])  # no path: any run may read it as its own
    moved = shutil.copytree(untaught[1], tmp_path / "elsewhere" / "u1")  # the same weights under another name
    model_dir, again = _control(str(moved), tmp_path / "b" / "control", tiny_tokenizer, cache)
    assert again["reused"] is True and again["cache"] == first["cache"]
    assert again["untaught"] == str(moved) and again["settings_from"] is None  # this run's, not the first's
    assert again["finetune"] == first["finetune"] and again["cost"] == first["cost"]  # what it cost when built
    assert str(tmp_path / "a") not in json.dumps(again) and (tmp_path / "b" / "control" / "model").is_dir()
