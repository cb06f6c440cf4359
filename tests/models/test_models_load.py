import json
import re
from pathlib import Path

import pytest
import torch

from obliviate.errors import ConfigError, ModelError
from obliviate.models.builders import tiny_llama, tiny_random
from obliviate.models.load import load_model, load_model_and_tokenizer, save_model
from obliviate.models.tokenizer import save_tokenizer


def _logits(model, vocab):
    ids = torch.arange(3, 3 + 12).remainder(vocab).view(2, 6)
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("make", [lambda: tiny_llama(300, n_layer=2, d_model=32),
                                  lambda: tiny_random("gpt2", tie_embeddings=False)],
                         ids=["llama_tied", "gpt2_untied"])
def test_save_load_round_trip_identical_logits(make, tmp_path):
    model = make()
    out = save_model(model, tmp_path / "m")
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert not list(out.glob("*.bin"))
    # Same attention kernel as the original (tiny_random uses eager), so logits match bit for bit.
    loaded = load_model(out, attn_implementation=model.config._attn_implementation)
    assert type(loaded) is type(model) and not loaded.training
    vocab = model.config.vocab_size
    assert torch.equal(_logits(model, vocab), _logits(loaded, vocab))
    tied = model.get_input_embeddings().weight is model.get_output_embeddings().weight
    assert (loaded.get_input_embeddings().weight is loaded.get_output_embeddings().weight) == tied


def test_load_dtype(tmp_path):
    save_model(tiny_llama(300, n_layer=1, d_model=32), tmp_path / "m")
    assert load_model(tmp_path / "m", dtype="bf16").dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="float8"):
        load_model(tmp_path / "m", dtype="float8")


def test_missing_or_malformed_dirs_name_the_path(tmp_path):
    with pytest.raises(ModelError, match="does-not-exist"):
        load_model(tmp_path / "does-not-exist")
    empty = tmp_path / "no_config_here"
    empty.mkdir()
    with pytest.raises(ModelError, match=r"no_config_here.*config\.json"):
        load_model(empty)
    bad = tmp_path / "bad_json"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="bad_json"):
        load_model(bad)
    a_file = tmp_path / "weights.txt"
    a_file.write_text("x")
    with pytest.raises(ModelError, match="weights.txt"):
        load_model(a_file)


def test_pickled_weights_are_refused(tmp_path):
    d = tmp_path / "pickled"
    save_model(tiny_llama(300, n_layer=1, d_model=32), d)
    (d / "model.safetensors").unlink()
    (d / "pytorch_model.bin").write_bytes(b"not even read")
    with pytest.raises(ModelError, match=r"pickled.*pytorch_model\.bin"):
        load_model(d)


def test_load_model_and_tokenizer(trained_tok, tmp_path):
    d = tmp_path / "both"
    save_model(tiny_llama(len(trained_tok), n_layer=1, d_model=32, pad_token_id=None), d)
    save_tokenizer(trained_tok, d)
    model, tok = load_model_and_tokenizer(d)
    assert tok.pad_token_id == 0 and model.config.pad_token_id == 0

    # A tokenizer without a pad token: "error" refuses, "eos" pads with eos.
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("pad_token")
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="no pad token"):
        load_model_and_tokenizer(d)
    model, tok = load_model_and_tokenizer(d, pad_policy="eos")
    assert tok.pad_token_id == tok.eos_token_id == 2 and model.config.pad_token_id == 2


def test_tokenizer_larger_than_embedding_is_refused(trained_tok, tmp_path):
    d = tmp_path / "small_vocab"
    save_model(tiny_llama(100, n_layer=1, d_model=32), d)
    save_tokenizer(trained_tok, d)
    with pytest.raises(ModelError, match="embeds only 100"):
        load_model_and_tokenizer(d)


# --------------------------------------------------------------------------- issue #16: non-finite weights, paths


def test_non_finite_weights_are_refused_naming_the_tensor(tmp_path):
    model = tiny_llama(300, n_layer=1, d_model=32)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[3, 5] = float("nan")
    d = save_model(model, tmp_path / "nan_weights")
    with pytest.raises(ModelError, match=rf"^model '{d}' has non-finite weights: 'model.layers.0.mlp.up_proj.weight' "
                                         r"holds NaN or infinite values$"):
        load_model(d)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e999"])
def test_config_json_with_a_non_finite_float_is_refused(value, tmp_path):
    d = save_model(tiny_llama(300, n_layer=1, d_model=32), tmp_path / "m")
    text = (d / "config.json").read_text()
    cfg = json.loads(text)
    assert "rms_norm_eps" in cfg
    (d / "config.json").write_text(text.replace(f'"rms_norm_eps": {cfg["rms_norm_eps"]}', f'"rms_norm_eps": {value}'))
    with pytest.raises(ModelError, match=r"config\.json': 'rms_norm_eps' is not a finite number$"):
        load_model(d)


def _no_hub(monkeypatch, what="AutoModelForCausalLM"):
    """Make every hub look-up fail as it does offline, and record the names looked up."""
    import transformers

    asked = []

    def offline(name, *a, **kw):
        asked.append(name)
        raise OSError(f"We couldn't connect to 'https://huggingface.co' to load the files of {name}.")

    monkeypatch.setattr(getattr(transformers, what), "from_pretrained", offline)
    return asked


def test_a_mistyped_local_path_says_no_such_local_directory(tmp_path, monkeypatch):
    """``runs/bsae`` could be a hub id: it is tried there, and the error says neither exists."""
    from obliviate.models.load import load_tokenizer

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "base").mkdir(parents=True)
    asked = _no_hub(monkeypatch)
    with pytest.raises(ModelError, match=r"^no local directory 'runs/bsae', and no hub model 'runs/bsae' could be "
                                         r"loaded: We couldn't connect"):
        load_model("runs/bsae")
    assert asked == ["runs/bsae"]
    asked = _no_hub(monkeypatch, "AutoTokenizer")
    with pytest.raises(ModelError, match=r"^no local directory 'runs/bsae', and no hub tokenizer 'runs/bsae'"):
        load_tokenizer("runs/bsae")
    assert asked == ["runs/bsae"]


@pytest.mark.parametrize("name", ["runs/a/bsae", "./runs/bsae", "/nowhere/bsae", "~/no-such-obliviate-model",
                                  "my model", "runs/bsae/"])
def test_names_that_cannot_be_hub_ids_fail_at_once_as_missing_directories(name, tmp_path, monkeypatch):
    from obliviate.models.load import load_tokenizer

    monkeypatch.chdir(tmp_path)
    asked = _no_hub(monkeypatch)
    shown = re.escape(str(Path(name)))  # as a path: "./runs/bsae" is shown as 'runs/bsae'
    with pytest.raises(ModelError, match=rf"^model directory '{shown}' does not exist$"):
        load_model(name)
    tok_asked = _no_hub(monkeypatch, "AutoTokenizer")
    with pytest.raises(ModelError, match=rf"^tokenizer directory '{shown}' does not exist$"):
        load_tokenizer(name)
    assert asked == tok_asked == []


def test_symbolic_link_loops_and_dangling_links_are_named_as_such(tmp_path, monkeypatch):
    from obliviate.models.load import load_tokenizer

    asked = _no_hub(monkeypatch)
    monkeypatch.chdir(tmp_path)
    Path("loop").symlink_to("loop")
    Path("gone").symlink_to("nowhere")
    for name in ("loop", str(tmp_path / "loop"), "loop/model"):
        with pytest.raises(ModelError, match=rf"^model directory '{re.escape(name)}' is a symbolic link loop"):
            load_model(name)
        with pytest.raises(ModelError, match=rf"^tokenizer directory '{re.escape(name)}' is a symbolic link loop"):
            load_tokenizer(name)
    with pytest.raises(ModelError, match=r"^model directory 'gone' is a symbolic link to 'nowhere', which does not "
                                         r"exist$"):
        load_model("gone")
    assert asked == []


def test_the_pad_token_error_names_the_command_line_flag(trained_tok, tmp_path):
    d = tmp_path / "nopad"
    save_model(tiny_llama(len(trained_tok), n_layer=1, d_model=32, pad_token_id=None), d)
    save_tokenizer(trained_tok, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg.pop("pad_token")
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match=r"has no pad token; use --pad-policy eos to pad with the eos token$"):
        load_model_and_tokenizer(d)
