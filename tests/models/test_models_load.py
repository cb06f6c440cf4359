import json

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


@pytest.mark.parametrize("make", [lambda: tiny_llama(300, n_layer=2, d_model=32), lambda: tiny_random("gpt2", tie_embeddings=False)],
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
