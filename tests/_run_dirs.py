"""What the run-directory tests share (tests/runs/test_run_dir_safety.py, tests/test_out_overlap.py): a saved
tiny model, a snapshot of a folder's files, and a quick unlearn command line."""

import os

from obliviate.models.builders import tiny_llama
from obliviate.models.load import save_model
from obliviate.models.tokenizer import train_tokenizer
from obliviate.world import WorldConfig, generate_world

from tests._cli_errors import SMALL_WORLD


def tiny_model_dir(root):
    """``root/model``: a saved tiny random Llama (2 layers, d=32) with its tokenizer."""
    w = generate_world(WorldConfig(seed=0, n_forget=3, n_holdout=1, n_retain=3, n_general=3, n_concept=2, n_toxic=4))
    tok = train_tokenizer([d["text"] for d in w.documents()], vocab_size=300)
    save_model(tiny_llama(len(tok), n_layer=2, d_model=32, n_head=2, seed=0), root / "model", tok)
    return root / "model"


def snapshot(root) -> dict:
    """Every file under ``root`` (links not followed) -> its bytes (a link: its target)."""
    out = {}
    for here, _, files in os.walk(root):
        for f in files:
            p = os.path.join(here, f)
            out[os.path.relpath(p, root)] = os.readlink(p) if os.path.islink(p) else open(p, "rb").read()
    return out


UNLEARN = ["unlearn", "--no-progress", *SMALL_WORLD, "unlearn.train.steps=2", "unlearn.batch_size=2",
           "eval.batch_size=8", "eval.max_new_tokens=2"]
