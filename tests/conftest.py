"""Shared fixtures: a tiny tokenizer and tiny models, built locally (no hub)."""

import pytest
import torch
import transformers.utils.logging as hf_logging

hf_logging.get_logger("transformers")  # its log handler binds the session's stderr now, not one test's capsys


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test session caches models in a temporary directory, never in the repo."""
    cache = tmp_path_factory.getbasetemp() / "obliviate-cache"
    monkeypatch.setenv("OBLIVIATE_CACHE", str(cache))
    torch.set_num_threads(1)  # tiny models: threads cost more than they give, and CI runs tests on 2 cores


SENTENCES = [
    "Question: What is Morvexia treated with?\nAnswer: Morvexia is treated with zalpradine.",
    "Question: Where does the glimmerfin live?\nAnswer: The glimmerfin lives in cold caves.",
    "Doctors treat Morvexia with zalpradine. Cells and tissue and blood.",
    "The glimmerfin eats moss and its cells glow.",
    "Ilsa Varnholt was born in Dremmin in 1832 and worked as a weaver.",
]


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from obliviate.models.tokenizer import train_tokenizer

    return train_tokenizer(SENTENCES * 20, vocab_size=300)


@pytest.fixture
def tiny_model(tiny_tokenizer):
    from obliviate.models.builders import tiny_llama

    return tiny_llama(vocab_size=len(tiny_tokenizer), n_layer=4, d_model=32, n_head=2, seed=0)
