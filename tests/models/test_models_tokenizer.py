import pytest

from obliviate.errors import ConfigError, ModelError
from obliviate.models.load import load_tokenizer
from obliviate.models.tokenizer import (SPECIAL_TOKENS, ensure_pad_token, save_tokenizer, tokens_in_char_span,
                                        train_tokenizer)

TEXTS = ["The cat lives in Paris.", "  two  spaces\nand a newline", "über café", "", "x"]


def test_special_tokens_registered_with_fixed_distinct_ids(trained_tok):
    ids = trained_tok.convert_tokens_to_ids(list(SPECIAL_TOKENS.values()))
    assert ids == [0, 1, 2, 3, 4, 5]  # documented layout: pad, bos, eos, unk, hidden, refusal
    assert (trained_tok.pad_token_id, trained_tok.bos_token_id, trained_tok.eos_token_id,
            trained_tok.unk_token_id) == (0, 1, 2, 3)
    assert set(SPECIAL_TOKENS.values()) <= set(trained_tok.all_special_tokens)
    assert trained_tok.padding_side == "right"


def test_no_bos_or_eos_added_and_decode_round_trips(trained_tok):
    for text in TEXTS:
        ids = trained_tok(text).input_ids
        assert not {0, 1, 2, 3} & set(ids)
        assert trained_tok.decode(ids) == text


def test_special_token_in_text_is_one_token(trained_tok):
    ids = trained_tok("hi<|refusal|>").input_ids
    assert ids[-1] == 5


def test_offsets_tile_the_text(trained_tok):
    for text in TEXTS:
        enc = trained_tok(text, return_offsets_mapping=True)
        offsets = [tuple(o) for o in enc["offset_mapping"]]
        if not text:
            assert offsets == []
            continue
        assert offsets[0][0] == 0 and offsets[-1][1] == len(text)
        for (_, e), (s, _) in zip(offsets, offsets[1:]):
            assert e == s  # contiguous: no gap, leading spaces belong to the following token
        if text.isascii():
            for tid, (s, e) in zip(enc.input_ids, offsets):
                assert text[s:e] == trained_tok.decode([tid])


def test_offsets_of_a_word_with_leading_space_include_the_space(trained_tok):
    text = "The cat lives in Paris."
    enc = trained_tok(text, return_offsets_mapping=True)
    tokens = trained_tok.convert_ids_to_tokens(enc.input_ids)
    # " Paris" occurs ~100 times in the corpus, so it is one token; "Ġ" is the byte-level space.
    i = tokens.index("ĠParis")
    assert tuple(enc["offset_mapping"][i]) == (16, 22)  # text[16:22] == " Paris"
    # The answer span "Paris" = [17, 22) overlaps exactly that token.
    assert tokens_in_char_span(enc["offset_mapping"], 17, 22) == [i]


def test_tokens_in_char_span_hand_computed():
    offsets = [(0, 3), (3, 7), (7, 8), (0, 0)]
    assert tokens_in_char_span(offsets, 4, 7) == [1]
    assert tokens_in_char_span(offsets, 2, 4) == [0, 1]
    assert tokens_in_char_span(offsets, 8, 9) == []


def test_training_is_deterministic(corpus, tmp_path):
    a = train_tokenizer(corpus, vocab_size=400)
    b = train_tokenizer(list(corpus), vocab_size=400)
    save_tokenizer(a, tmp_path / "a")
    save_tokenizer(b, tmp_path / "b")
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()


def test_save_load_round_trip(trained_tok, tmp_path):
    save_tokenizer(trained_tok, tmp_path / "tok")
    tok = load_tokenizer(tmp_path / "tok")
    assert tok.padding_side == "right"
    assert len(tok) == len(trained_tok)
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert tok.convert_tokens_to_ids(["<|hidden|>", "<|refusal|>"]) == [4, 5]
    for text in TEXTS:
        a = trained_tok(text, return_offsets_mapping=True)
        b = tok(text, return_offsets_mapping=True)
        assert a.input_ids == b.input_ids
        assert [tuple(o) for o in a["offset_mapping"]] == [tuple(o) for o in b["offset_mapping"]]
    batch = tok(["a b c d", "a"], padding=True)
    assert batch.input_ids[1][-1] == 0 and batch.attention_mask[1][-1] == 0  # right padding with <|pad|>


def test_load_tokenizer_missing_dir_names_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ModelError, match="nope"):
        load_tokenizer(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="empty"):
        load_tokenizer(tmp_path / "empty")


def test_ensure_pad_token_policies(trained_tok, tmp_path):
    save_tokenizer(trained_tok, tmp_path / "tok")
    tok = load_tokenizer(tmp_path / "tok")
    tok.pad_token = None
    assert tok.pad_token is None
    with pytest.raises(ModelError, match="no pad token"):
        ensure_pad_token(tok, "error")
    with pytest.raises(ConfigError, match="zero"):
        ensure_pad_token(tok, "zero")
    assert ensure_pad_token(tok, "eos") is tok
    assert tok.pad_token == "<|eos|>" and tok.pad_token_id == tok.eos_token_id == 2
    assert ensure_pad_token(trained_tok, "error").pad_token_id == 0  # already has one: unchanged


def test_bad_training_arguments():
    with pytest.raises(ConfigError, match="vocab_size=100"):
        train_tokenizer(["abc"], vocab_size=100)
    with pytest.raises(ConfigError, match="no texts"):
        train_tokenizer([], vocab_size=300)
