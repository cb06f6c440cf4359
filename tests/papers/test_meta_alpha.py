"""REINFORCE-learned alpha: the update, the outer loop on a toy reward, splits, and a tiny real run."""

import json
import math

import pytest
import torch

from obliviate.errors import ConfigError
from obliviate.papers.function_specific.meta_alpha import (
    learn_alpha_unlearn,
    plot_alpha_trajectory,
    reinforce_alpha,
    reinforce_update,
    split_holdout,
    world_meta_splits,
)

LOG3 = math.log(3.0)


def test_reinforce_update_hand_computed():
    # mean R = 1; terms (2-1)(1-0)/0.25 = 4 and (0-1)(-1-0)/0.25 = 4 -> mean 4; mu = 0 + 0.1 * 4
    assert reinforce_update(0.0, [1.0, -1.0], [2.0, 0.0], sigma=0.5, eta=0.1) == pytest.approx(0.4)
    # mu = 1: terms (3-2)(2-1)/1 = 1 and (1-2)(0.5-1)/1 = 0.5 -> mean 0.75; mu = 1 + 0.2 * 0.75
    assert reinforce_update(1.0, [2.0, 0.5], [3.0, 1.0], sigma=1.0, eta=0.2) == pytest.approx(1.15)
    assert reinforce_update(0.3, [1.0, -2.0], [5.0, 5.0], sigma=0.5, eta=1.0) == pytest.approx(0.3)  # no signal
    with pytest.raises(ConfigError):
        reinforce_update(0.0, [1.0], [1.0, 2.0], sigma=0.5, eta=0.1)


def toy_branch(state, alpha):
    """Noise-free reward with its best alpha at 3; the state records the alphas tried."""
    return state + [alpha], -(math.log(alpha) - LOG3) ** 2


@pytest.mark.parametrize("mu0", [LOG3 - 2.0, LOG3 + 2.0])
def test_mu_moves_to_the_best_alpha_from_both_sides(mu0):
    _, traj = reinforce_alpha([], toy_branch, mu0, outer_steps=60, K=4, sigma=0.5, eta=0.1, seed=0)
    mus = [s["mu"] for s in traj["steps"]] + [traj["final_mu"]]
    assert abs(traj["final_mu"] - LOG3) < 0.3
    # it moves towards log 3 (not just ends there): distance at 1/3 of the run already halved
    assert abs(mus[20] - LOG3) < 0.5 * abs(mu0 - LOG3)
    assert traj["final_alpha"] == pytest.approx(math.exp(traj["final_mu"]))


def test_trajectory_and_best_branch_continuation():
    state, traj = reinforce_alpha([], toy_branch, 0.0, outer_steps=3, K=4, seed=5)
    assert len(traj["steps"]) == 3
    for s in traj["steps"]:
        assert len(s["alphas"]) == 4 and len(s["rewards"]) == 4
        assert s["chosen"] == max(range(4), key=lambda i: s["rewards"][i])
        assert s["chosen_alpha"] == pytest.approx(s["alphas"][s["chosen"]])
        assert s["mu_next"] == pytest.approx(reinforce_update(s["mu"], s["log_alphas"], s["rewards"], 0.5, 0.05))
    # the state continued from the chosen branch at every step
    assert state == pytest.approx([s["chosen_alpha"] for s in traj["steps"]])
    _, again = reinforce_alpha([], toy_branch, 0.0, outer_steps=3, K=4, seed=5)
    assert again == traj  # seeded


def test_holdout_splits_are_disjoint():
    from obliviate.world import WorldConfig, generate_world

    meta, rest = split_holdout(list(range(20)), 0.25, seed=1)
    assert len(meta) == 5 and sorted(meta + rest) == list(range(20))
    world = generate_world(WorldConfig(seed=0))
    sp = world_meta_splits(world, frac=0.25, seed=0)
    for kind in ("forget", "retain"):
        meta_q = {f["question"] for f in sp[f"meta_{kind}"]}
        final_q = {f["question"] for f in sp[f"final_{kind}"]}
        n = len(world.facts_by_split(kind))
        assert not meta_q & final_q and len(meta_q) + len(final_q) == n
        assert len(meta_q) == round(0.25 * n)


def test_learn_alpha_unlearn_tiny(tiny_model, tiny_tokenizer, tmp_path):
    from obliviate.models.layers import mlp_down_proj
    from obliviate.train import TrainConfig

    forget = [("Question: What is Morvexia treated with?\nAnswer:", " Morvexia is treated with zalpradine.")]
    retain = [("Question: Where does the glimmerfin live?\nAnswer:", " The glimmerfin lives in cold caves.")]
    before = mlp_down_proj(tiny_model, 2).weight.detach().clone()
    calls = []

    def reward(model):  # any deterministic score of the branch's weights
        calls.append(1)
        return -float(mlp_down_proj(model, 2).weight.norm())

    tcfg = TrainConfig(steps=1, lr=1e-2, schedule="constant", progress=False, log_every=1)
    model, traj = learn_alpha_unlearn(tiny_model, tiny_tokenizer, "cosine_rmu", forget, retain, reward,
                                      outer_steps=2, K=2, M=2, params={"layer": 2}, train=tcfg, batch_size=1,
                                      out_dir=tmp_path)
    assert len(calls) == 4 and len(traj["steps"]) == 2
    assert traj["mu0"] == pytest.approx(math.log(1200.0)) and traj["method"] == "cosine_rmu"
    assert torch.equal(mlp_down_proj(tiny_model, 2).weight, before)  # branches work on copies
    assert not torch.equal(mlp_down_proj(model, 2).weight, before)
    assert json.loads((tmp_path / "alpha_trajectory.json").read_text())["steps"][1]["step"] == 1
    assert (tmp_path / "alpha_trajectory.png").stat().st_size > 0
    with pytest.raises(ConfigError, match="npo"):
        learn_alpha_unlearn(tiny_model, tiny_tokenizer, "npo", forget, retain, reward)


def test_plot_alpha_trajectory(tmp_path):
    _, traj = reinforce_alpha([], toy_branch, 0.0, outer_steps=4, K=4, seed=0)
    png = plot_alpha_trajectory(traj, tmp_path / "a.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_qa_s_reward_composes_s_unlearning(monkeypatch):
    import obliviate.papers.function_specific.meta_alpha as meta_alpha
    from obliviate.papers.function_specific.meta_alpha import qa_s_reward

    table = {("base", "f"): 0.8, ("base", "r"): 0.9, ("after", "f"): 0.2, ("after", "r"): 0.6}

    def fake_qa(model, tok, questions, answers, max_new_tokens=24):
        return {"exact_match": table[(model, questions[0])], "rouge_l": 0.0}

    monkeypatch.setattr(meta_alpha, "qa_accuracy", fake_qa)
    reward = qa_s_reward("base", None, [{"question": "f", "answer": "x"}], [{"question": "r", "answer": "y"}])
    # U = (0.8 - 0.2) / 0.8 = 0.75, R = 0.6 / 0.9 -> S = 0.5
    assert reward("after") == pytest.approx(0.5)
    assert reward("base") == pytest.approx(0.0)
