"""A small world, its tokenizer and a tiny Llama, the fixtures of tests/attacks and tests/evidence (each
folder's conftest.py imports them)."""

import dataclasses

import pytest
import torch

from obliviate.world import WorldConfig, generate_world

SMALL_WORLD = WorldConfig(seed=0, n_forget=4, n_holdout=2, n_retain=4, n_general=4, n_concept=3, n_toxic=6)


@pytest.fixture(autouse=True)
def _one_thread():
    """These models are tiny: one thread is faster, and much faster on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def small_world():
    return generate_world(SMALL_WORLD)


@pytest.fixture(scope="session")
def world_tokenizer(small_world):
    from obliviate.models import train_tokenizer

    texts = [d["text"] for d in small_world.documents()] + [p["text"] for p in small_world.relearn_paragraphs]
    return train_tokenizer(texts, vocab_size=512)


@pytest.fixture
def world_model(world_tokenizer):
    from obliviate.models import tiny_llama

    return tiny_llama(vocab_size=len(world_tokenizer), n_layer=2, d_model=32, n_head=2, seed=0)


@pytest.fixture
def unchanged():
    """``check = unchanged(model)`` snapshots its parameters; ``check()`` asserts none was modified."""

    def snap(model):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        grads = {n: p.requires_grad for n, p in model.named_parameters()}

        def check():
            after = dict(model.named_parameters())
            assert set(after) == set(before)
            for n, t in before.items():
                assert torch.equal(after[n].detach(), t), f"parameter {n} was modified"
                assert after[n].requires_grad == grads[n], f"requires_grad of {n} was changed"

        return check

    return snap


@pytest.fixture
def cut_forget():
    """``cut(task, n, name=None)``: ``task`` with its forget evaluation sets (only set ``name``, where given) cut to
    their first ``n`` items, so that the item count an attack records can be told from a whole set's."""

    def cut(task, n, name=None):
        evals = [dataclasses.replace(es, items=list(es.items)[:n]) if es.role == "forget" and name in (None, es.name)
                 else es for es in task.evals]
        return dataclasses.replace(task, evals=evals)

    return cut
