import copy

import numpy as np
import pytest
import torch

from obliviate.errors import DataError
from obliviate.eval.oracle import (
    forget_quality_vs_oracle,
    oracle_distance,
    oracle_gap,
    oracle_reference,
    world_truth_ratios,
)
from obliviate.eval.tofu import answer_nll
from obliviate.world import WorldConfig, generate_world


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(seed=0, n_forget=4, n_holdout=2, n_retain=4, n_general=4, n_concept=3,
                                      n_toxic=6))


@pytest.fixture(scope="module")
def tok(world):
    from obliviate.models import train_tokenizer

    return train_tokenizer([d["text"] for d in world.documents()], vocab_size=512)


@pytest.fixture(scope="module")
def model(tok):
    from obliviate.models import tiny_llama

    return tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0).eval()


def test_oracle_gap_is_signed():
    gap, abs_gap = oracle_gap(0.25, 0.75)
    assert gap == pytest.approx(-0.5) and abs_gap == pytest.approx(0.5)  # over-forgot
    gap, abs_gap = oracle_gap(0.75, 0.5)
    assert gap == pytest.approx(0.25) and abs_gap == pytest.approx(0.25)  # still knows more


def test_truth_ratio_is_paraphrase_vs_mean_perturbed_loss(world, tok, model):
    facts = world.facts_by_split("forget")[:2]
    tr = world_truth_ratios(model, tok, facts)
    f = facts[1]
    para = answer_nll(model, tok, [f["question"]], [f["answer_paraphrase"]])[0]
    pert = answer_nll(model, tok, [f["question"]] * len(f["perturbed_answers"]), f["perturbed_answers"])
    assert tr.shape == (2,)
    assert tr[1] == pytest.approx(np.exp(para - pert.mean()), rel=1e-5)


def test_identical_models_are_indistinguishable(world, tok, model):
    twin = copy.deepcopy(model)
    res = oracle_distance(model, twin, tok, world)
    assert res["forget_quality"] == pytest.approx(1.0)
    assert res["forget_acc_gap"] == 0.0 and res["abs_forget_acc_gap"] == 0.0


def test_forget_quality_is_low_for_separated_truth_ratios():
    a = np.linspace(0.1, 0.5, 12)
    # all 12 of one sample below all 12 of the other: KS statistic 1, exact p = 2 / C(24, 12)
    assert forget_quality_vs_oracle(a, a + 10) == pytest.approx(2 / 2704156)
    assert forget_quality_vs_oracle(a, a) == pytest.approx(1.0)


def test_oracle_numbers_are_cached_and_can_be_passed_in(world, tok, model):
    oracle = copy.deepcopy(model)
    first = oracle_reference(oracle, tok, world)
    assert oracle_reference(oracle, tok, world) is first
    with torch.no_grad():  # a cached oracle is not re-evaluated
        for p in oracle.parameters():
            p.add_(1.0)
    assert oracle_reference(oracle, tok, world)["truth_ratios"] is first["truth_ratios"]
    far = oracle_distance(model, None, tok, world, oracle_truth_ratios=first["truth_ratios"] * 1e6,
                          oracle_forget_acc=1.0)
    assert far["forget_quality"] < 1e-3
    assert far["forget_acc_gap"] == pytest.approx(far["forget_acc"] - 1.0)
    with pytest.raises(DataError, match="oracle"):
        oracle_distance(model, None, tok, world)
