import pytest
import torch

from obliviate.errors import ConfigError
from obliviate.models.builders import (
    ARCHS,
    SIZES,
    TinyModelConfig,
    build_model,
    build_tiny_model,
    default_d_ff,
    param_count,
    parse_size,
    tiny_llama,
    tiny_random,
)


def test_default_d_ff_hand_computed():
    assert default_d_ff(64) == 176  # 8/3*64 = 170.7 -> next multiple of 16
    assert default_d_ff(96) == 256  # exactly 256
    assert default_d_ff(128) == 352  # 341.3 -> 352


def test_nano_param_count_hand_computed():
    m = build_model("nano", vocab_size=300)
    d, f, n = 64, 176, 4
    per_layer = 4 * d * d + 3 * d * f + 2 * d  # q,k,v,o + gate,up,down + 2 RMSNorms
    assert param_count(m) == n * per_layer + d  # + final norm
    assert param_count(m, non_embedding=False) == n * per_layer + d + 300 * d  # tied: embedding counted once


def test_sizes_are_roughly_geometric():
    targets = {"nano": 0.2e6, "micro": 0.5e6, "tiny": 1.5e6, "small": 4e6}
    assert list(SIZES) == list(targets)
    for name, target in targets.items():
        m = tiny_llama(256, **SIZES[name])
        assert 0.8 * target <= param_count(m) <= 1.2 * target, name


def test_seed_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = tiny_llama(100, n_layer=2, d_model=32, seed=5)
    after = torch.rand(3)
    b = tiny_llama(100, n_layer=2, d_model=32, seed=5)
    c = tiny_llama(100, n_layer=2, d_model=32, seed=6)
    assert torch.equal(expected, after)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.mlp.down_proj.weight"], sc["model.layers.0.mlp.down_proj.weight"])


def test_config_fields():
    m = tiny_llama(100, n_layer=2, d_model=32, n_head=2, d_ff=48, max_len=64, tie_embeddings=False, eos_token_id=7)
    c = m.config
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (2, 32, 2, 48)
    assert (c.max_position_embeddings, c.pad_token_id, c.bos_token_id, c.eos_token_id) == (64, 0, 1, 7)
    assert m.lm_head.weight is not m.model.embed_tokens.weight
    assert not m.training


def test_bad_builder_arguments():
    with pytest.raises(ConfigError, match="huge"):
        build_model("huge", 100)
    with pytest.raises(ConfigError, match="n_head=3"):
        tiny_llama(100, d_model=32, n_head=3)
    with pytest.raises(ConfigError, match="eos_token_id=100"):
        tiny_llama(100, eos_token_id=100)
    with pytest.raises(ConfigError, match="bert"):
        tiny_random("bert")


@pytest.mark.parametrize("arch", ARCHS)
def test_tiny_random_runs_and_is_deterministic(arch):
    a, b = tiny_random(arch, seed=1), tiny_random(arch, seed=1)
    ids = torch.randint(3, 128, (2, 5))
    with torch.no_grad():
        la, lb = a(ids).logits, b(ids).logits
    assert la.shape == (2, 5, 128)
    assert torch.equal(la, lb)


def test_parse_size():
    assert parse_size("2x32") == (2, 32, 2)
    assert parse_size("1x16") == (1, 16, 1)
    assert parse_size("3x48") == (3, 48, 3)
    assert parse_size("1x8") == (1, 8, 1)
    for bad in ("2-32", "x32", "0x32", "2x"):
        with pytest.raises(ConfigError, match="size"):
            parse_size(bad)


def test_tiny_model_config_of_a_named_size_or_layers_by_width():
    assert TinyModelConfig.of_size("nano", max_len=64) == TinyModelConfig(n_layer=4, d_model=64, n_head=4, max_len=64)
    assert TinyModelConfig.of_size("3x48") == TinyModelConfig(n_layer=3, d_model=48, n_head=3)  # heads of 16 dims
    with pytest.raises(ConfigError, match="size"):
        TinyModelConfig.of_size("huge")
    with pytest.raises(ConfigError, match="'max_len'"):
        TinyModelConfig(max_len=0)


def test_build_tiny_model_trains_or_takes_a_tokenizer(corpus, trained_tok):
    cfg = TinyModelConfig(n_layer=2, d_model=32, n_head=2, max_len=64, vocab_size=400)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    model, tok = build_tiny_model(corpus, cfg, seed=5)
    assert torch.equal(torch.rand(3), expected)  # the global RNG is left alone
    assert tok.get_vocab() == trained_tok.get_vocab()  # the same BPE as train_tokenizer(corpus, vocab_size=400)
    c = model.config
    assert (c.vocab_size, c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.max_position_embeddings) == (
        len(tok), 2, 32, 2, 64)
    assert (c.pad_token_id, c.bos_token_id, c.eos_token_id) == (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id)
    # a tokenizer given is used as it is, and the same seed gives the same weights
    again, same_tok = build_tiny_model(trained_tok, cfg, seed=5)
    assert same_tok is trained_tok
    sa, sb = model.state_dict(), again.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    # no tokenizer: cfg.vocab_size ids and the default special ids
    bare, none = build_tiny_model(None, cfg, seed=5)
    assert none is None and bare.config.vocab_size == 400 and bare.config.eos_token_id == 2
    with pytest.raises(ConfigError, match="texts, a tokenizer or None"):
        build_tiny_model("one text", cfg)
