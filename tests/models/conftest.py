import random

import pytest

from obliviate.models.tokenizer import train_tokenizer

_SUBJECTS = ["The cat", "A dog", "My friend", "The old king", "Paris", "Our teacher", "The river"]
_VERBS = ["sat on", "ran to", "looked at", "lives in", "is near", "talked about", "wrote to"]
_OBJECTS = ["the mat", "Paris", "the capital of France", "a small house", "the café", "über cool music", "the sea"]


def synthetic_sentences(n: int = 300, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}." for _ in range(n)]


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return synthetic_sentences()


@pytest.fixture(scope="session")
def trained_tok(corpus):
    return train_tokenizer(corpus, vocab_size=400)
