"""Weak-label rule (>= 2 latents, then window expansion), latent choice, thresholds, PRF1."""

import numpy as np
import pytest

from obliviate.data import TokenDataset
from obliviate.errors import ConfigError, DataError
from obliviate.filtering.weak_labels import (
    domain_ratio,
    ground_truth,
    latent_thresholds,
    prf1,
    select_domain_latents,
    split_flat,
    top_activating_tokens,
    weak_labels,
    window_expand,
)

THR = np.array([1.0, 1.0, 2.0])
# Two sequences back to back (lengths 7 and 4); columns are the three domain latents.
CODES = np.array([
    # sequence A
    [3.0, 3.0, 3.0],  # 0 bos (special): never labelled
    [0.5, 0.0, 0.0],  # 1 any > 0: labelled at the 2nd expansion step (via 2)
    [0.4, 0.0, 0.0],  # 2 any > 0: labelled at the 1st step (via 3)
    [1.5, 1.2, 0.0],  # 3 two latents above threshold: seed
    [1.5, 0.0, 0.0],  # 4 only one above threshold: not a seed; any > 0, next to 3: labelled
    [1.0, 1.0, 2.0],  # 5 equal to the thresholds (strict >): not a seed; any > 0: labelled
    [1.1, 0.0, 2.1],  # 6 seed
    # sequence B
    [0.3, 0.0, 0.0],  # 0 any > 0, but its left neighbour (A6) is in another sequence: not labelled
    [0.0, 0.0, 0.0],  # 1 nothing active
    [2.0, 3.0, 0.0],  # 2 seed
    [0.5, 0.0, 0.0],  # 3 eos (special): never labelled
])
LENGTHS = [7, 4]
SPECIAL = np.array([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], bool)


def test_rule_with_window_expansion_hand_computed():
    got = weak_labels(CODES, THR, LENGTHS, special=SPECIAL)
    expected = [0, 1, 1, 1, 1, 1, 1] + [0, 0, 1, 0]
    np.testing.assert_array_equal(got.astype(int), expected)


def test_rule_without_window_and_with_one_latent():
    got = weak_labels(CODES, THR, LENGTHS, special=SPECIAL, window=False)
    np.testing.assert_array_equal(got.astype(int), [0, 0, 0, 1, 0, 0, 1] + [0, 0, 1, 0])
    got = weak_labels(CODES, THR, LENGTHS, special=SPECIAL, window=False, min_latents=1)
    np.testing.assert_array_equal(got.astype(int), [0, 0, 0, 1, 1, 0, 1] + [0, 0, 1, 0])


def test_window_expansion_grows_step_by_step_and_stops_at_gaps():
    seed = np.array([0, 0, 0, 0, 1, 0, 0, 0], bool)
    eligible = np.array([1, 1, 0, 1, 1, 1, 1, 0], bool)
    np.testing.assert_array_equal(window_expand(seed, eligible, [8]).astype(int), [0, 0, 0, 1, 1, 1, 1, 0])
    # the same tokens split into two sequences at index 5: no crossing
    np.testing.assert_array_equal(window_expand(seed, eligible, [5, 3]).astype(int), [0, 0, 0, 1, 1, 0, 0, 0])
    with pytest.raises(DataError):
        window_expand(seed, eligible, [4, 3])


def test_domain_ratio_and_selection():
    codes = np.array([
        [2.0, 1.0, 0.0],
        [2.0, 1.0, 1.0],
        [0.0, 1.0, 0.0],
        [0.0, 1.0, 0.5],
    ])
    dom = np.array([1, 1, 0, 0], bool)
    r = domain_ratio(codes, dom)
    # latent 0: 2 / ~0 (huge); latent 1: 1/1; latent 2: 0.5 / 0.25 = 2
    assert r[0] > 1e5 and r[1] == pytest.approx(1.0) and r[2] == pytest.approx(2.0, rel=1e-4)
    assert select_domain_latents(codes, dom, min_ratio=1.5, min_domain_freq=0.0) == [0, 2]
    assert select_domain_latents(codes, dom, min_ratio=1.5, min_domain_freq=0.6) == [0]  # latent 2 fires on 1/2
    assert select_domain_latents(codes, dom, min_ratio=1.5, min_domain_freq=0.0, max_latents=1) == [0]
    with pytest.raises(ConfigError):
        select_domain_latents(codes)


def test_selection_through_a_judge():
    codes = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0]])
    token_ids = np.array([10, 11, 12])
    words = {10: "fever", 11: "moss", 12: "tumour"}
    tops = top_activating_tokens(codes, token_ids, words.__getitem__, latents=[0, 1])
    assert tops == {0: ["fever", "tumour"], 1: ["moss"]}
    seen = []

    def judge(latent, tokens):
        seen.append((latent, tokens))
        return "fever" in tokens

    assert select_domain_latents(codes, judge=judge, top_tokens=tops) == [0]
    assert sorted(seen) == [(0, ["fever", "tumour"]), (1, ["moss"])]


def test_thresholds_are_quantiles_of_positive_activations():
    z = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [0.0, 0.0]])
    thr = latent_thresholds(z, quantile=0.5)
    assert thr[0] == pytest.approx(2.0)
    assert np.isinf(thr[1])


def test_prf1_hand_computed():
    m = prf1(np.array([1, 1, 0, 0, 1], bool), np.array([1, 0, 1, 0, 1], bool))
    assert (m["tp"], m["fp"], m["fn"]) == (2, 1, 1)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    m = prf1([np.array([1, 0], bool), np.array([0, 0, 0], bool)], [np.array([1, 1], bool), np.array([1, 0, 0], bool)])
    assert m["precision"] == 1.0 and m["recall"] == pytest.approx(1 / 3) and m["f1"] == pytest.approx(0.5)
    m = prf1(np.zeros(3, bool), np.array([1, 0, 0], bool))
    assert m["precision"] == 0.0 and m["recall"] == 0.0 and m["f1"] == 0.0


def test_ground_truth_and_split():
    ds = TokenDataset([np.arange(3), np.arange(2)], {"domain": [np.array([0, 1, 1]), np.array([2, 0])]},
                      {"domain": ["general", "medicine", "biology"]})
    gt = ground_truth(ds)
    assert [g.tolist() for g in gt] == [[False, True, True], [False, False]]
    assert [s.tolist() for s in split_flat(np.arange(5), [3, 2])] == [[0, 1, 2], [3, 4]]
