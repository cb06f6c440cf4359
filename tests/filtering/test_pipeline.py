"""``sae_weak_labels``: weak token labels from a labeller model end to end (SAE, calibration, the rule)."""

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from obliviate.filtering import WeakLabelConfig, prf1, sae_weak_labels, train_lm


@pytest.fixture(scope="module")
def labeller(tiny_world_tokens):
    w = tiny_world_tokens
    torch.set_num_threads(1)
    with threadpool_limits(1):
        lm = train_lm(w.ds, len(w.tok), n_layer=2, d_model=32, n_head=2, steps=20, batch_size=8, seed=0,
                      pad_id=w.tok.pad_token_id, bos_id=w.tok.bos_token_id, eos_id=w.tok.eos_token_id)
    return lm.eval()


def test_weak_labels_read_ground_truth_only_on_the_calibration_slice(labeller, tiny_world_tokens):
    w = tiny_world_tokens
    lm, ds, truth, special, pad = labeller, w.ds, w.truth, w.special, w.tok.pad_token_id
    cfg = WeakLabelConfig(latents=64, k=8, steps=40, calibration_fraction=0.25, min_ratio=1.5, min_latents=1)
    with threadpool_limits(1):
        weak, info = sae_weak_labels(lm, ds, truth, 1, cfg, special_ids=special, pad_id=pad)
    assert [len(w) for w in weak] == [len(s) for s in ds.input_ids]
    assert not any(w[np.isin(s, special)].any() for w, s in zip(weak, ds.input_ids))  # specials never flagged
    assert info["sae"]["layer"] == 1 and info["sae"]["n_domain_latents"] == len(info["sae"]["domain_latents"]) > 0
    assert info["weak_labels"] == {k: prf1(weak, truth)[k] for k in ("precision", "recall", "f1")}
    # the truth beyond the calibration slice is never read to make the labels: flipping it changes nothing
    n_cal = round(0.25 * len(ds))
    flipped = truth[:n_cal] + [~t for t in truth[n_cal:]]
    with threadpool_limits(1):
        again, info2 = sae_weak_labels(lm, ds, flipped, 1, cfg, special_ids=special, pad_id=pad)
    assert all((a == b).all() for a, b in zip(weak, again))
    assert info2["sae"]["domain_latents"] == info["sae"]["domain_latents"]
    assert info2["weak_labels"] != info["weak_labels"]  # but they are scored against the truth given
