import copy

import numpy as np
import pytest

from obliviate.errors import DataError
from obliviate.eval.oracle import oracle_distance, oracle_gap, oracle_reference, task_truth_ratios, truth_ratio_items
from obliviate.eval.tofu import answer_nll, forget_quality
from obliviate.tasks.base import Data, EvalSet, Task
from obliviate.tasks.world import task_from_world
from obliviate.world import generate_world

from _tiny_world import SMALL_WORLD, _one_thread  # noqa: F401  (the tiny world and one thread, as the attack tests)


@pytest.fixture(scope="module")
def world():
    return generate_world(SMALL_WORLD)


@pytest.fixture(scope="module")
def tok(world):
    from obliviate.models import train_tokenizer

    return train_tokenizer([d["text"] for d in world.documents()], vocab_size=512)


@pytest.fixture(scope="module")
def model(tok):
    from obliviate.models import tiny_llama

    # float64: truth ratios of batched items are checked against answers scored one batch each (other padding)
    return tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, seed=0).double().eval()


def test_oracle_gap_is_signed():
    gap, abs_gap = oracle_gap(0.25, 0.75)
    assert gap == pytest.approx(-0.5) and abs_gap == pytest.approx(0.5)  # over-forgot
    gap, abs_gap = oracle_gap(0.75, 0.5)
    assert gap == pytest.approx(0.25) and abs_gap == pytest.approx(0.25)  # still knows more


@pytest.fixture(scope="module")
def task(world):
    return task_from_world(world)


def test_truth_ratio_is_paraphrase_vs_mean_perturbed_loss(world, task, tok, model):
    tr = task_truth_ratios(model, tok, task)
    facts = world.facts_by_split("forget")
    assert tr.shape == (len(facts),)
    f = facts[1]
    para = answer_nll(model, tok, [f["question"]], [f["answer_paraphrase"]])[0]
    pert = answer_nll(model, tok, [f["question"]] * len(f["perturbed_answers"]), f["perturbed_answers"])
    assert tr[1] == pytest.approx(np.exp(para - pert.mean()), rel=1e-5)


def test_identical_models_are_indistinguishable(task, tok, model):
    ref = oracle_reference(copy.deepcopy(model), tok, task, forget_score=0.5)
    res = oracle_distance(model, tok, task, ref, forget_score=0.5)
    assert res["forget_quality"] == pytest.approx(1.0)
    assert res["forget_score_gap"] == 0.0 and res["abs_forget_score_gap"] == 0.0


def test_forget_quality_is_low_for_separated_truth_ratios(task, tok, model):
    a = np.linspace(0.1, 0.5, 12)
    # all 12 of one sample below all 12 of the other: KS statistic 1, exact p = 2 / C(24, 12)
    assert forget_quality(a, a + 10) == pytest.approx(2 / 2704156)
    assert forget_quality(a, a) == pytest.approx(1.0)
    ref = oracle_reference(model, tok, task, forget_score=1.0)
    far = oracle_distance(model, tok, task, {**ref, "truth_ratios": ref["truth_ratios"] * 1e6}, forget_score=0.25)
    assert far["forget_quality"] < 1e-3 and far["forget_score_gap"] == pytest.approx(-0.75)


def test_a_task_without_perturbed_answers_has_no_forget_quality(tok, model):
    task = Task("t", forget=Data(qa=[("a", "b")]), retain=Data(qa=[("c", "d")]),
                evals=[EvalSet("forget_qa", "forget", "qa", [{"question": "a", "answer": "b"}])])
    assert truth_ratio_items(task) == []
    ref = oracle_reference(model, tok, task, forget_score=0.0)
    assert ref["truth_ratios"] is None
    assert oracle_distance(model, tok, task, ref, forget_score=0.0)["forget_quality"] is None
    with pytest.raises(DataError, match="perturbed"):
        task_truth_ratios(model, tok, task)
