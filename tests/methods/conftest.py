"""Fixtures of the method tests: a base model of the world demo's kind, and a paired batch with its plain
per-example reference maths (:mod:`_reference`)."""

import copy

import pytest
import torch

from obliviate.world import WorldConfig, generate_world

WORLD = WorldConfig(seed=0, n_forget=3, n_holdout=1, n_retain=3, n_general=3, n_concept=2, n_toxic=4)


@pytest.fixture(scope="session")
def world_base():
    """The world demo's setting in small: the world task (a small seeded world) and a tiny Llama taught its forget
    and retain facts (fine-tuned on them, as the demo's base model knows them from pretraining): ``{"model",
    "tokenizer", "task"}``. The model is shared: copy it before training."""
    import obliviate
    from obliviate.models import tiny_llama, train_tokenizer
    from obliviate.tasks.world import task_from_world

    world = generate_world(WORLD)
    task = task_from_world(world)
    texts = [d["text"] for d in world.documents()] + [f"{q} {a}" for q, a in task.forget.qa + task.retain.qa]
    tok = train_tokenizer(texts, vocab_size=400)
    model, _ = obliviate.finetune(tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0), tok,
                                  task, epochs=60, lr=3e-3, batch_size=8)
    return {"model": model, "tokenizer": tok, "task": task}


@pytest.fixture
def fresh(request):
    """``fresh(base)``: a trainable deep copy of a session model."""
    def make(model):
        m = copy.deepcopy(model)
        for p in m.parameters():
            p.requires_grad_(True)
        return m.train()
    return make


@pytest.fixture
def double_model(tiny_model):
    """The shared tiny Llama in float64, so that the method and its reference differ only by rounding far below
    the 1e-5 the tests ask."""
    torch.manual_seed(0)
    return tiny_model.double()
