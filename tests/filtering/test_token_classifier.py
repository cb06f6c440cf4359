"""``fit_token_classifiers``: the biLM token classifier and the document baseline, fit on weak labels end to end."""

import numpy as np
import pytest

from obliviate.data import TokenDataset
from obliviate.filtering import TokenClassifierConfig, fit_token_classifiers


def _split(w, n_train):
    ds = w.ds
    part = lambda lo, hi: TokenDataset(ds.input_ids[lo:hi], {k: v[lo:hi] for k, v in ds.labels.items()},  # noqa: E731
                                       ds.vocab)
    return part(0, n_train), part(n_train, len(ds)), w.truth[:n_train], w.truth[n_train:]


def _fit(w, weak_of, tmp_path=None, **cfg):
    train, held, truth_tr, truth_ev = _split(w, int(0.8 * len(w.ds)))
    tok = w.tok
    cfg = TokenClassifierConfig(**{"steps": 4, "noise_ps": [0.0, 0.5], "thresholds": [0.3, 0.5], **cfg})
    clf = fit_token_classifiers(train, held, weak_of(truth_tr), truth_tr, truth_ev, len(tok), cfg,
                                special_ids=w.special, pad_id=tok.pad_token_id, bos_id=tok.bos_token_id,
                                eos_id=tok.eos_token_id, save_dir=tmp_path)
    return train, clf


def test_heads_fit_on_the_truth_as_weak_labels_score_alike(tiny_world_tokens, tmp_path):
    w = tiny_world_tokens
    train, clf = _fit(w, lambda truth: [t.copy() for t in truth], tmp_path)
    m = clf.metrics
    # weak labels equal to the truth: the same sample, the same labels, so the same head and the same sweep
    assert m["token_classifier"]["weak"] == m["token_classifier"]["ground_truth"]
    assert [r["p"] for r in m["classifier_noise"]] == [0.0, 0.5]
    assert m["classifier_noise"][0]["auroc"] == m["token_classifier"]["weak"]["auroc"]  # p = 0 flips nothing
    assert [len(p) for p in clf.probs] == [len(s) for s in train.input_ids]
    for p, s in zip(clf.probs, train.input_ids):
        assert (p[np.isin(s, w.special)] == 0).all() and ((0 <= p) & (p <= 1)).all()
    assert clf.doc_probs.shape == (len(train),)
    assert set(m["document_classifier"]) == {"weak", "ground_truth"}
    assert (tmp_path / "bilm" / "bilm.json").is_file() and (tmp_path / "token_head.safetensors").is_file()


def test_one_class_document_labels_rank_documents_by_their_weak_fraction(tiny_world_tokens):
    w = tiny_world_tokens
    train, clf = _fit(w, lambda truth: [t.copy() for t in truth], doc_label_fraction=0.999, context_window=0)
    # no document is 99.9% in-domain: its labels are all one class, so no document classifier is fit
    assert clf.metrics["document_classifier"]["weak"]["auroc"] is None
    weak = w.truth[:len(train)]
    assert clf.doc_probs == pytest.approx(np.array([np.mean(t) for t in weak], dtype=np.float32))
