"""Filtering strategies: masking arithmetic, position conventions, removal, document drop, label noise."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from obliviate.data import TokenDataset
from obliviate.errors import ConfigError, DataError
from obliviate.filtering.strategies import (
    add_label_noise,
    apply_strategy,
    collate_weighted,
    document_flags,
    loss_weights,
    make_batch_fn,
    pack_filtered,
)
from obliviate.losses import IGNORE_INDEX, lm_loss

LN2 = math.log(2.0)


class FixedLogits(torch.nn.Module):
    """Returns the same (T, V) logits for every row: log-probabilities chosen by hand."""

    def __init__(self, logp):
        super().__init__()
        self.logits = torch.log(torch.tensor(logp, dtype=torch.float32))  # (T, V)

    def forward(self, input_ids, attention_mask=None):
        B, T = input_ids.shape
        return SimpleNamespace(logits=self.logits[:T].expand(B, T, -1))


# Sequence [0, 1, 1, 0]: position 0 predicts 1 with p=1/2, position 1 predicts 1 with p=1/4,
# position 2 predicts 0 with p=1/16, so the target CEs of tokens 1..3 are ln2, 2 ln2, 4 ln2.
SEQ = np.array([0, 1, 1, 0])
MODEL = FixedLogits([[1 / 2, 1 / 2], [3 / 4, 1 / 4], [1 / 16, 15 / 16], [1 / 2, 1 / 2]])


def test_position_conventions_hand_computed():
    f = np.array([0, 1, 1, 0], dtype=bool)
    np.testing.assert_array_equal(loss_weights(f, "target"), [1, 0, 0, 1])
    np.testing.assert_array_equal(loss_weights(f, "input"), [1, 1, 0, 0])
    f = np.array([1, 0, 0, 1, 0], dtype=bool)
    np.testing.assert_array_equal(loss_weights(f, "target"), [0, 1, 1, 0, 1])
    np.testing.assert_array_equal(loss_weights(f, "input"), [1, 0, 1, 1, 0])
    with pytest.raises(ConfigError, match="sideways"):
        loss_weights(f, "sideways")


@pytest.mark.parametrize("convention,expected", [
    ("target", (2 + 4) / 2 * LN2),  # token 1 flagged: its own CE (ln2) is dropped
    ("input", (1 + 4) / 2 * LN2),  # token 1 flagged: the CE of the token after it (2 ln2) is dropped
])
def test_masked_loss_is_mean_over_unmasked_tokens(convention, expected):
    ds = TokenDataset([SEQ])
    flags = [np.array([0, 1, 0, 0], dtype=bool)]
    fds = apply_strategy(ds, flags, "mask", convention)
    batch = make_batch_fn(fds, batch_size=1, seed=0, pad_id=0)(0)
    assert float(lm_loss(MODEL, batch)) == pytest.approx(expected, rel=1e-6)


def test_unfiltered_loss_is_plain_mean():
    fds = apply_strategy(TokenDataset([SEQ]), None, "none")
    batch = make_batch_fn(fds, 1, 0, 0)(0)
    assert float(lm_loss(MODEL, batch)) == pytest.approx((1 + 2 + 4) / 3 * LN2, rel=1e-6)


def test_collate_weighted_pads_with_zero_weight_and_ignore_label():
    b = collate_weighted([np.array([5, 6, 7]), np.array([8])], [np.array([1, 0, 1.0]), np.array([1.0])], pad_id=0)
    np.testing.assert_array_equal(b["loss_weights"].numpy(), [[1, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(b["labels"].numpy(), [[5, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]])
    np.testing.assert_array_equal(b["attention_mask"].numpy(), [[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize("convention", ["target", "input"])
def test_removal_substitutes_hidden_exactly_at_flags(convention):
    hidden = 4
    ids = [np.array([1, 10, 11, 12, 13, 2]), np.array([1, 20, 21, 2])]
    flags = [np.array([0, 0, 1, 1, 0, 0], bool), np.array([0, 1, 0, 0], bool)]
    ds = TokenDataset([a.copy() for a in ids], {"domain": [np.zeros(6, int), np.ones(4, int)]})
    fds = apply_strategy(ds, flags, "remove", convention, hidden_id=hidden)
    np.testing.assert_array_equal(fds.input_ids[0], [1, 10, 4, 4, 13, 2])
    np.testing.assert_array_equal(fds.input_ids[1], [1, 4, 21, 2])
    np.testing.assert_array_equal(ds.input_ids[0], ids[0])  # the input dataset is untouched
    if convention == "target":  # the loss of predicting a hidden token is masked
        np.testing.assert_array_equal(fds.weights[0], [1, 1, 0, 0, 1, 1])
        np.testing.assert_array_equal(fds.weights[1], [1, 0, 1, 1])
    else:  # the loss at positions whose input is hidden is masked
        np.testing.assert_array_equal(fds.weights[0], [1, 1, 1, 0, 0, 1])
        np.testing.assert_array_equal(fds.weights[1], [1, 1, 0, 1])
    batch = collate_weighted(fds.input_ids, fds.weights, pad_id=0)  # what the batch_fn hands to lm_loss
    assert int((batch["labels"] == hidden).sum()) == 3  # the hidden ids are the targets there...
    hidden_w = batch["loss_weights"][batch["labels"] == hidden]
    expected = [0, 0, 0] if convention == "target" else [1, 0, 1]  # ...with the convention's weights
    np.testing.assert_array_equal(hidden_w.numpy(), expected)


def test_removal_needs_hidden_id_and_flags_must_fit():
    ds = TokenDataset([np.array([1, 2, 3])])
    with pytest.raises(ConfigError, match="hidden_id"):
        apply_strategy(ds, [np.array([0, 1, 0], bool)], "remove")
    with pytest.raises(DataError, match="shape"):
        apply_strategy(ds, [np.array([0, 1], bool)], "mask")
    with pytest.raises(ConfigError, match="shuffle"):
        apply_strategy(ds, [np.array([0, 1, 0], bool)], "shuffle")


def test_document_drop():
    ds = TokenDataset([np.array([1, 2, 3]), np.array([4, 5]), np.array([6, 7, 8, 9])],
                      {"domain": [np.array([0, 0, 0]), np.array([1, 1]), np.array([2, 2, 2, 2])]})
    flags = [np.array([0, 0, 0], bool), np.array([0, 1], bool), np.array([0, 0, 0, 1], bool)]
    np.testing.assert_array_equal(document_flags(flags), [False, True, True])
    np.testing.assert_array_equal(document_flags(flags, min_fraction=0.3), [False, True, False])
    fds = apply_strategy(ds, flags, "drop_document")
    np.testing.assert_array_equal(fds.kept, [0])
    assert [list(s) for s in fds.input_ids] == [[1, 2, 3]]
    assert [list(s) for s in fds.labels["domain"]] == [[0, 0, 0]]
    assert all((w == 1).all() for w in fds.weights)
    fds = apply_strategy(ds, None, "drop_document", doc_flags=[True, False, False])
    np.testing.assert_array_equal(fds.kept, [1, 2])


def test_label_noise_rate():
    rng = np.random.default_rng(1)
    flags = rng.random(100_000) < 0.3
    noisy = add_label_noise(flags, 0.1, seed=0)
    assert abs((noisy != flags).mean() - 0.1) < 0.01
    np.testing.assert_array_equal(add_label_noise(flags, 0.1, seed=0), noisy)  # seeded
    np.testing.assert_array_equal(add_label_noise(flags, 0.0, seed=0), flags)
    per_seq = [flags[:50_000], flags[50_000:]]
    noisy_list = add_label_noise(per_seq, 0.1, seed=3)
    flipped = np.concatenate([a != b for a, b in zip(noisy_list, per_seq)])
    assert abs(flipped.mean() - 0.1) < 0.01
    with pytest.raises(ConfigError):
        add_label_noise(flags, 1.5)


def test_pack_filtered_keeps_weights_aligned():
    ds = TokenDataset([np.array([1, 5, 6, 2]), np.array([1, 7, 2])])
    fds = apply_strategy(ds, [np.array([0, 1, 0, 0], bool), np.array([0, 0, 1], bool)], "mask", "target")
    packed = pack_filtered(fds, row_len=16)
    assert len(packed) == 1
    np.testing.assert_array_equal(packed.input_ids[0], [1, 5, 6, 2, 1, 7, 2])
    np.testing.assert_array_equal(packed.weights[0], [1, 0, 1, 1, 1, 1, 0])
