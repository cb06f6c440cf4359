"""Shared fixtures: a tiny tokenizer and tiny models, built locally (no hub)."""

import os

import pytest
import torch
import transformers.utils.logging as hf_logging

hf_logging.get_logger("transformers")  # its log handler binds the session's stderr now, not one test's capsys


def pytest_collection_modifyitems(config, items):
    """The files holding end-to-end tests (``@pytest.mark.heavy(seconds)``) first, the heaviest first, then the
    others in their own order: ``make test`` hands whole files to the workers in this order (``--dist loadfile``),
    so the long files start at once and the short ones fill in, and both workers end together. The order
    within a file is kept, and a file's tests run in one worker, so its module fixtures are built once."""
    weight: dict = {}
    for item in items:
        mark = item.get_closest_marker("heavy")
        if mark is not None:
            weight[item.path] = weight.get(item.path, 0) + mark.args[0]
    items.sort(key=lambda item: -weight.get(item.path, 0))  # stable: ties keep their order


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """The whole session caches (pretrained models, tokenizers, the controls of ``attack`` and ``compare``) in a
    temporary directory, never in the user's home (``~/.cache/obliviate``, the default) nor the repo: set before any
    fixture of a wider scope runs, and what a test's ``monkeypatch.undo()`` falls back to."""
    before = os.environ.get("OBLIVIATE_CACHE")
    os.environ["OBLIVIATE_CACHE"] = str(tmp_path_factory.getbasetemp() / "obliviate-cache")
    yield
    if before is None:
        os.environ.pop("OBLIVIATE_CACHE", None)
    else:
        os.environ["OBLIVIATE_CACHE"] = before


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Each test caches models in the session's temporary directory, never in the user's home or the repo."""
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


TAUGHT_FORGET = [("What is Morvexia treated with?", "zalpradine"), ("Where does the glimmerfin live?", "cold caves"),
                 ("What does the glimmerfin eat?", "moss"), ("Who was born in Dremmin?", "Ilsa Varnholt"),
                 ("What did Ilsa Varnholt work as?", "a weaver"), ("When was Ilsa Varnholt born?", "1832"),
                 ("What glows in the glimmerfin?", "its cells"), ("Who treats Morvexia?", "doctors")]
TAUGHT_RETAIN = [("What color is the sky?", "blue"), ("What do cows drink?", "water"),
                 ("Where do fish swim?", "the sea"), ("What do bees make?", "honey"),
                 ("What falls from clouds?", "rain"), ("What do birds lay?", "eggs"),
                 ("What is frozen water?", "ice"), ("What shines at night?", "the moon")]


@pytest.fixture(scope="session")
def taught(tmp_path_factory):
    """A tiny Llama (2 x 32) fine-tuned until it answers 8 forget and 8 retain QA pairs (exact match 1.0), saved
    with its tokenizer in ``dir`` beside the pairs as ``forget.jsonl`` / ``retain.jsonl``: a base model whose
    unlearning can forget, keep or break something, in about two seconds."""
    import json

    import obliviate
    from obliviate.models import save_model
    from obliviate.models.builders import tiny_llama
    from obliviate.models.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("taught")
    for name, pairs in (("forget", TAUGHT_FORGET), ("retain", TAUGHT_RETAIN)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in pairs))
    tok = train_tokenizer([f"Question: {q}\nAnswer: {a}" for q, a in TAUGHT_FORGET + TAUGHT_RETAIN] * 20,
                          vocab_size=300)
    task = obliviate.load_task(forget=str(root / "forget.jsonl"), retain=str(root / "retain.jsonl"))
    model, _ = obliviate.finetune(tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0), tok,
                                  task, epochs=300, lr=3e-3, batch_size=8)
    m = obliviate.evaluate(model, tok, task)
    assert m["forget_score"] == 1.0 and m["retain_score"] == 1.0, m
    save_model(model, root / "model")
    tok.save_pretrained(str(root / "model"))
    return {"dir": root / "model", "forget": root / "forget.jsonl", "retain": root / "retain.jsonl",
            "model": model, "tokenizer": tok, "task": task}
