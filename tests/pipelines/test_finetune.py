"""The one fine-tuning pipeline: ``obliviate finetune`` and ``obliviate.finetune`` run the same code, so the same
seed and settings give the same results.json metrics and the same weights."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import obliviate
from obliviate.cli.main import main
from obliviate.models import save_model
from obliviate.models.builders import tiny_llama
from obliviate.models.load import load_model, load_tokenizer


def _weights(model_dir) -> dict:
    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@pytest.fixture
def untaught(taught, tmp_path):
    """A random-init tiny Llama with the taught model's tokenizer, saved."""
    tok = taught["tokenizer"]
    d = tmp_path / "untaught"
    save_model(tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=1), d)
    tok.save_pretrained(str(d))
    return d


def test_the_command_and_the_api_give_the_same_metrics_and_weights(taught, untaught, tmp_path):
    settings = {"epochs": 3, "lr": 3e-3, "batch_size": 4}
    assert main(["finetune", "--out", str(tmp_path / "cli"), "--model", str(untaught), "--forget",
                 str(taught["forget"]), "--retain", str(taught["retain"]), "--seed", "5", "--no-progress",
                 *[f"finetune.{k}={v}" for k, v in settings.items()]]) == 0
    model, tok = load_model(str(untaught)), load_tokenizer(str(untaught))
    task = obliviate.load_task(forget=str(taught["forget"]), retain=str(taught["retain"]))
    new, info = obliviate.finetune(model, tok, task, seed=5, out_dir=tmp_path / "api", **settings)
    cli = json.loads((tmp_path / "cli" / "results.json").read_text())
    api = json.loads((tmp_path / "api" / "results.json").read_text())
    assert cli["metrics"] == api["metrics"] and api["metrics"]["finetuned"] == pytest.approx(info["metrics"])
    assert cli["config"]["finetune"] == api["config"]["finetune"] and cli["finetune"] == api["finetune"]
    a, b, base = _weights(tmp_path / "cli" / "model"), _weights(tmp_path / "api" / "model"), _weights(untaught)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], base[k]) for k in a)  # the run trained something
    assert new is not model and all(torch.equal(p, base[n]) for n, p in model.state_dict().items() if n in base)


def test_the_api_without_a_run_directory_writes_and_evaluates_nothing(taught, untaught, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, tok = load_model(str(untaught)), load_tokenizer(str(untaught))
    _, info = obliviate.finetune(model, tok, taught["task"], epochs=1, batch_size=8)
    assert "metrics" not in info and "lines" not in info and info["finetune"]["epochs"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["untaught"]  # (the fixture's model)
