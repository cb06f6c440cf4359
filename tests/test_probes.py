"""Probe directions: planted directions per layer, last-token states, the CLI command."""

import argparse
import json
import math

import numpy as np
import pytest
import torch

from obliviate.errors import DataError
from obliviate.models.layers import last_token_index
from obliviate.eval.probes import default_probe_layers, fit_probe_directions, last_token_states, pairwise_cosine


def test_default_probe_layers():
    assert default_probe_layers(4) == [1, 2, 3]
    assert default_probe_layers(32) == [8, 16, 24]
    assert default_probe_layers(2) == [0, 1]
    for n in range(3, 50):
        layers = default_probe_layers(n)
        assert len(set(layers)) == 3 and 0 <= min(layers) and max(layers) < n


def test_pairwise_cosine_hand_computed():
    m = pairwise_cosine({0: np.array([1.0, 0.0]), 5: np.array([2.0, 2.0]), 7: np.array([0.0, -3.0])})
    s = 1 / math.sqrt(2)
    np.testing.assert_allclose(m, [[1, s, 0], [s, 1, -s], [0, -s, 1]], atol=1e-12)


def test_planted_directions_are_recovered():
    d, n = 8, 1500
    e = np.eye(d)
    planted = {
        0: e[0],
        1: 0.5 * e[0] + math.sqrt(0.75) * e[1],  # 60 degrees from layer 0's
        2: e[2],  # orthogonal to both
    }
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    # isotropic noise + class shift along the planted direction: the Bayes (and logistic) direction is the shift
    states = {l: rng.normal(size=(n, d)) + np.outer(2.0 * y - 1.0, 1.5 * v) for l, v in planted.items()}
    probes = fit_probe_directions(states, y, C=1.0, seed=0)
    for l, v in planted.items():
        got = probes[l]["direction"]
        assert np.linalg.norm(got) == pytest.approx(1.0, abs=1e-5)
        assert float(got @ v) > 0.9  # same sign too: the direction points to class 1
        assert probes[l]["accuracy"] > 0.85
    cos = pairwise_cosine({l: p["direction"] for l, p in probes.items()})
    # each recovered direction is off by a few degrees, so the planted cosines hold to ~0.1: on data seeds 0-9 the
    # largest deviation is 0.035-0.100, got @ v >= 0.985 and the accuracy >= 0.906 (issue #56)
    np.testing.assert_allclose(cos, [[1, 0.5, 0], [0.5, 1, 0], [0, 0, 1]], atol=0.15)


def test_fit_needs_both_classes():
    with pytest.raises(DataError, match="both classes"):
        fit_probe_directions({0: np.zeros((3, 2))}, [1, 1, 1])


def test_last_token_index():
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert last_token_index(right).tolist() == [2, 3]
    assert last_token_index(left).tolist() == [3, 3]
    ids = torch.tensor([[5, 6, 2, 0], [5, 6, 7, 8]])
    assert last_token_index(right, ids, skip_id=2).tolist() == [1, 3]  # eos skipped in row 0 only
    with pytest.raises(DataError):
        last_token_index(torch.tensor([[0, 0]]))


def test_last_token_states_match_unpadded_forward(tiny_model, tiny_tokenizer):
    from obliviate.models.layers import capture_hidden

    texts = ["Cells and tissue.", "The glimmerfin eats moss and its cells glow at night."]
    states = last_token_states(tiny_model, tiny_tokenizer, texts, [0, 3])
    assert states[0].shape == (2, 32) and states[3].shape == (2, 32)
    for i, t in enumerate(texts):  # one at a time, no padding
        ids = torch.tensor([[tiny_tokenizer.bos_token_id] + tiny_tokenizer(t, add_special_tokens=False)["input_ids"]])
        with torch.no_grad(), capture_hidden(tiny_model, [3]) as cap:
            tiny_model(input_ids=ids)
        np.testing.assert_allclose(states[3][i], cap[3][0, -1].numpy(), rtol=1e-4, atol=1e-5)


def test_probe_directions_command(tiny_model, tiny_tokenizer, tmp_path, capsys):
    from obliviate.cli import probe_directions as cmd
    from obliviate.models.load import save_model
    from obliviate.models.tokenizer import save_tokenizer

    mdir = tmp_path / "model"
    save_model(tiny_model, mdir)
    save_tokenizer(tiny_tokenizer, mdir)
    parser = argparse.ArgumentParser()
    cmd.register(parser.add_subparsers())
    out = tmp_path / "run"
    args = parser.parse_args(["probe-directions", "--model", str(mdir), "--layers", "0,2,3", "--seed", "3",
                              "--out", str(out), "n_toxic=20"])
    args.fn(args)
    printed = capsys.readouterr().out
    assert "pairwise cosine" in printed and "40 world sentences" in printed
    res = json.loads((out / "results.json").read_text())
    cos = np.array(res["metrics"]["cosine"])
    assert res["metrics"]["layers"] == [0, 2, 3] and cos.shape == (3, 3)
    np.testing.assert_allclose(np.diag(cos), 1.0, atol=1e-6)
    np.testing.assert_allclose(cos, cos.T, atol=1e-12)
