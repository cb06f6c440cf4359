from types import SimpleNamespace

import pytest
import torch

from obliviate.data import encode_documents
from obliviate.filtering import ground_truth
from obliviate.models.tokenizer import train_tokenizer
from obliviate.world import WorldConfig, generate_world


@pytest.fixture(autouse=True)
def _one_thread():
    """Small matrices on a busy 2-core machine: multi-threaded torch/BLAS is many times slower
    than one thread (thread hand-off), for torch and for scikit-learn's solvers alike."""
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny_world_tokens():
    """A small world's documents, tokenized (400-token BPE), with their forget-domain ground truth."""
    world = generate_world(WorldConfig(seed=0, n_forget=4, n_holdout=2, n_retain=4, n_general=4, n_concept=3,
                                       n_toxic=6))
    docs = world.documents()
    tok = train_tokenizer([d["text"] for d in docs], vocab_size=400)
    ds = encode_documents(tok, docs)
    return SimpleNamespace(tok=tok, ds=ds, truth=ground_truth(ds),
                           special=[tok.pad_token_id, tok.bos_token_id, tok.eos_token_id])
