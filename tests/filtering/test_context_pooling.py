"""Context pooling of token features (window means by hand) and the batched classifier path."""

import numpy as np
import pytest
import torch

from obliviate.errors import ConfigError, DataError
from obliviate.filtering.classifiers import ContextPooled, LogisticHead, TokenClassifier, window_mean


def test_window_mean_by_hand():
    h = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    # window 1: [1,2] -> 1.5, [1,2,3] -> 2, [2,3,4] -> 3, [3,4] -> 3.5 (clipped at the ends)
    assert window_mean(h, 1).squeeze(1).tolist() == [1.5, 2.0, 3.0, 3.5]
    assert window_mean(h, 0).squeeze(1).tolist() == [1.0, 2.0, 3.0, 4.0]
    assert window_mean(h, 10).squeeze(1).tolist() == [2.5] * 4


def test_window_mean_never_crosses_a_sequence_boundary():
    h = torch.tensor([[1.0], [2.0], [3.0], [10.0], [20.0]])  # sequences [1, 2, 3] and [10, 20]
    out = window_mean(h, 1, lengths=[3, 2]).squeeze(1).tolist()
    assert out == [1.5, 2.0, 2.5, 15.0, 15.0]
    with pytest.raises(DataError):
        window_mean(h, 1, lengths=[3, 3])


class Ids:
    """Feature of a token = its id (one column), so pooled features are checkable by hand."""

    dim = 1

    def features(self, data, batch_size=32):
        return [torch.as_tensor(np.asarray(s), dtype=torch.float32)[:, None] for s in data]


def test_context_pooled_features_and_classifier():
    seqs = [np.array([1, 2, 3]), np.array([10, 20])]
    feat = ContextPooled(Ids(), window=1)
    assert feat.dim == 2
    f = feat.features(seqs)
    assert f[0].tolist() == [[1, 1.5], [2, 2], [3, 2.5]]
    assert f[1].tolist() == [[10, 15], [20, 15]]
    with pytest.raises(ConfigError):
        ContextPooled(Ids(), window=-1)
    # the batched head gives each sequence its own probabilities, 0 on special tokens (id 1 here)
    clf = TokenClassifier(feat, special_ids=[1])
    clf.head = LogisticHead(torch.zeros(2), torch.ones(2), torch.tensor([1.0, 0.0]), -2.5)
    p = clf.predict_proba(seqs)
    assert [len(x) for x in p] == [3, 2]
    expected = [0.0, 1 / (1 + np.exp(0.5)), 1 / (1 + np.exp(-0.5)), 1 / (1 + np.exp(-7.5)), 1 / (1 + np.exp(-17.5))]
    np.testing.assert_allclose(np.concatenate(p), expected, rtol=1e-6)
    assert clf.predict_proba([]) == []
