"""A loaded model is exactly the files on disk, or an error; an adapter beside it is attached only when asked
(``--adapter DIR`` / ``load_model(adapter=DIR)``), merged into the weights."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from obliviate.cli.main import main
from obliviate.errors import ModelError
from obliviate.models.builders import tiny_random
from obliviate.models.load import attach_adapter, load_model, save_model
from tests._cli_errors import one_error
from tests.tasks._userdata import save_tiny_model, write_user_files


def _saved(tmp_path, arch, tie=None, name="m"):
    model = tiny_random(arch, tie_embeddings=tie, n_layer=2, d_model=16, n_head=2)
    return model, save_model(model, tmp_path / name)


def _rewrite(d, drop=(), add=None):
    sd = load_file(d / "model.safetensors")
    for k in drop:
        del sd[k]
    sd.update(add or {})
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    return sd


@pytest.mark.parametrize("arch,tie", [("llama", False), ("llama", True), ("gpt2", None)])
def test_tied_weights_a_checkpoint_omits_still_load_exactly(arch, tie, tmp_path):
    model, d = _saved(tmp_path, arch, tie)
    loaded = load_model(d)
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in model.state_dict().items())
    tied = loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
    assert tied == (tie is not False)  # gpt2 ties by default, and then the checkpoint holds one copy
    assert len(load_file(d / "model.safetensors")) == len(model.state_dict()) - tied


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("n_missing", [1, 5])
def test_tensors_missing_from_the_checkpoint_are_refused_naming_them(arch, n_missing, tmp_path):
    _, d = _saved(tmp_path, arch)
    keys = sorted(load_file(d / "model.safetensors"))
    drop = [k for k in keys if ".1." in k][:n_missing]  # tensors of the second block
    _rewrite(d, drop=drop)
    with pytest.raises(ModelError) as e:
        load_model(d)
    msg = str(e.value)
    assert f"lacks {n_missing} tensor" in msg and repr(sorted(drop)[0]) in msg and "random" in msg
    assert ("..." in msg) == (n_missing > 3) and "\n" not in msg


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_tensors_the_model_has_no_place_for_are_refused_naming_them(arch, tmp_path):
    _, d = _saved(tmp_path, arch)
    _rewrite(d, add={"extra.head.weight": torch.zeros(2, 2), "model.layers.9.bogus": torch.ones(3)})
    with pytest.raises(ModelError, match=r"holds 2 tensors \('extra.head.weight', 'model.layers.9.bogus'\) the "
                                         r"model has no place for"):
        load_model(d)


def test_a_model_with_missing_tensors_is_one_line_at_the_command_line(tmp_path, capsys):
    files = write_user_files(tmp_path / "data", n_forget=4, n_retain=4)
    d = save_tiny_model(tmp_path / "model", "gpt2", files["texts"], d_model=16, n_layer=2)
    drop = sorted(k for k in load_file(d / "model.safetensors") if k.endswith("ln_f.weight"))
    _rewrite(d, drop=drop)
    out = tmp_path / "out"
    assert main(["unlearn", "--model", str(d), "--method", "npo", "--out", str(out), "--forget",
                 str(files["forget"]), "--retain", str(files["retain_qa"]), "--no-progress"]) == 2
    line = one_error(capsys)
    assert "lacks 1 tensor ('transformer.ln_f.weight')" in line and not out.exists()


def _with_adapter(model, directory, seed=0):
    """A LoRA adapter of ``model`` with non-zero weights, saved in ``directory`` (peft's own files)."""
    from peft import LoraConfig, get_peft_model

    pm = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    pm.save_pretrained(str(directory))
    return pm


def test_a_stray_adapter_is_refused_and_attached_only_when_asked(tmp_path):
    base, d = _saved(tmp_path, "llama")
    plain = {k: v.clone() for k, v in base.state_dict().items()}
    pm = _with_adapter(base, d)  # adapter_config.json + adapter_model.safetensors beside the weights
    assert (d / "adapter_config.json").exists() and (d / "config.json").exists()
    merged = {k: v.clone() for k, v in pm.merge_and_unload().state_dict().items()}
    assert any(not torch.equal(merged[k], plain[k]) for k in plain)
    with pytest.raises(ModelError, match=r"also holds an adapter \(adapter_config.json\): give adapter="):
        load_model(d)
    attached = load_model(d, adapter=d)  # the stray adapter, asked for: merged into the directory's own weights
    assert not hasattr(attached, "peft_config") and attached.state_dict().keys() == plain.keys()
    assert all(torch.allclose(attached.state_dict()[k], merged[k], atol=1e-6) for k in plain)
    elsewhere = tmp_path / "adapter"
    shutil.copytree(d, elsewhere)
    for f in d.glob("adapter*"):
        f.unlink()
    assert all(torch.equal(load_model(d).state_dict()[k], plain[k]) for k in plain)  # without it: the weights alone
    assert all(torch.allclose(load_model(d, adapter=elsewhere).state_dict()[k], merged[k], atol=1e-6) for k in plain)


def test_an_adapter_that_does_not_fit_is_refused(tmp_path):
    base, d = _saved(tmp_path, "llama")
    _with_adapter(base, tmp_path / "a")
    other, _ = _saved(tmp_path, "llama", name="wide")
    sd = load_file(tmp_path / "a" / "adapter_model.safetensors")
    drop = sorted(sd)[0]
    del sd[drop]
    save_file(sd, tmp_path / "a" / "adapter_model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelError,
                       match=r"cannot attach adapter .*: it does not fit the model: its weights file lacks 1"):
        attach_adapter(tiny_random("llama", n_layer=2, d_model=16, n_head=2), tmp_path / "a")
    with pytest.raises(ModelError, match="has no adapter_config.json"):
        attach_adapter(other, tmp_path / "wide")
    (tmp_path / "a" / "adapter_model.safetensors").rename(tmp_path / "a" / "adapter_model.bin")
    with pytest.raises(ModelError, match="refusing to unpickle"):
        attach_adapter(other, tmp_path / "a")


def test_unlearn_refuses_a_stray_adapter_and_trains_and_saves_through_one_asked_for(tmp_path, capsys):
    files = write_user_files(tmp_path / "data", n_forget=4, n_retain=4)
    d = save_tiny_model(tmp_path / "model", "llama", files["texts"], d_model=16, n_layer=2)
    _with_adapter(load_model(d), d)
    run = ["unlearn", "--model", str(d), "--method", "graddiff", "--forget", str(files["forget"]), "--retain",
           str(files["retain_qa"]), "--no-progress", "unlearn.train.steps=1", "eval.batch_size=4"]
    out = tmp_path / "out"
    assert main([*run, "--out", str(out)]) == 2
    line = one_error(capsys)
    assert f"also holds an adapter (adapter_config.json): give --adapter {d} to" in line and not out.exists()
    assert "adapter=" not in line  # the command line's option, not the API's argument
    assert main([*run, "--out", str(out), "--adapter", str(d)]) == 0
    assert f"obliviate: attached the adapter {d} to {d}" in capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete"
    assert not (out / "model" / "adapter_config.json").exists()
    assert load_model(out / "model").state_dict().keys() == load_model(d, adapter=d).state_dict().keys()
