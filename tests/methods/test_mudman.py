"""MUDMAN against its algorithm (Sondej et al. 2025): the disruption mask keeps an unlearning-gradient entry only where
its sign is the retain gradient's running mean's, the unlearning gradient is divided by its global norm, and it is
taken at a forget-relearning adversary's weights; two steps' gradients by hand, then runs through the engine."""

import copy

import pytest
import torch

from _reference import grads, neg_entropy, paired_batch, retain_nll, run_on_random_arch, run_tiny
from obliviate.errors import ConfigError
from obliviate.methods import build_method
from obliviate.methods.mudman import disruption_mask, global_norm
from obliviate.models.builders import tiny_random


def test_the_mask_keeps_an_entry_only_where_the_signs_agree():
    unlearn = [torch.tensor([[1.0, -2.0, 3.0], [-4.0, 5.0, 6.0]]), torch.tensor([7.0, -8.0])]
    retain = [torch.tensor([[0.5, 0.1, -0.2], [-1.0, -3.0, 0.0]]), torch.tensor([2.0, -1e-9])]
    masked = disruption_mask(unlearn, retain)
    # kept: same sign (1 with 0.5, -4 with -1, 7 with 2, -8 with -1e-9); zeroed: opposite sign, or a zero retain entry
    assert torch.equal(masked[0], torch.tensor([[1.0, 0.0, 0.0], [-4.0, 0.0, 0.0]]))
    assert torch.equal(masked[1], torch.tensor([7.0, -8.0]))


def test_the_global_norm_is_over_every_tensor():
    g = [torch.tensor([3.0, 0.0]), torch.tensor([[0.0], [4.0]])]
    assert float(global_norm(g)) == pytest.approx(5.0)


def _by_hand(model, batch, steps, *, gamma, alpha, mu, adv_lr):
    """The expected gradient of the summed terms at each of ``steps`` steps, theta held fixed (no optimizer step):
    the retain EMA, the adversary's SGD on the forget NLL from theta, the masked and normalised neg-entropy
    gradient at the adversary, plus alpha times the retain NLL's gradient."""
    g_r = grads(model, retain_nll(model, batch["retain"]))
    acc = {n: torch.zeros_like(g) for n, g in g_r.items()}
    adversary = copy.deepcopy(model)
    out = []
    for _ in range(steps):
        acc = {n: mu * acc[n] + (1 - mu) * g_r[n] for n in acc}
        g_u = grads(adversary, neg_entropy(adversary, batch["forget"]))
        norm = torch.sqrt(sum((g ** 2).sum() for g in g_u.values()))
        kept = {n: (torch.sign(g_u[n]) == torch.sign(acc[n])) for n in g_u}
        out.append(({n: gamma * g_u[n] * kept[n] / norm + alpha * g_r[n] for n in g_u}, kept))
        g_nll = grads(adversary, retain_nll(adversary, batch["forget"]))
        with torch.no_grad():
            for n, p in adversary.named_parameters():
                p.sub_(adv_lr * g_nll[n])
    return out


def test_two_steps_match_the_algorithm(double_model, tiny_tokenizer):
    gamma, alpha, mu, adv_lr = 0.7, 1.3, 0.8, 0.5
    batch = paired_batch(tiny_tokenizer)
    before = {n: p.detach().clone() for n, p in double_model.named_parameters()}
    method = build_method("mudman", {"gamma": gamma, "alpha": alpha, "retain_momentum": mu, "adv_lr": adv_lr,
                                     "modules": ["all"]})
    expected = _by_hand(double_model, batch, 2, gamma=gamma, alpha=alpha, mu=mu, adv_lr=adv_lr)
    for step, (want, kept) in enumerate(expected):
        terms = method.loss(double_model, batch, None)
        for n, p in double_model.named_parameters():  # the adversary's weights are swapped out again
            assert torch.equal(p.detach(), before[n]), n
        got = grads(double_model, sum(terms.values()))
        for n in got:
            torch.testing.assert_close(got[n], want[n], atol=1e-7, rtol=1e-6, msg=lambda m: f"step {step}, {n}: {m}")
        share = sum(int(k.sum()) for k in kept.values()) / sum(k.numel() for k in kept.values())
        assert 0.05 < share < 0.95, share  # the mask drops some entries and keeps others: the test sees it


def test_the_unlearning_gradient_agrees_in_sign_with_the_retain_mean_everywhere(double_model, tiny_tokenizer):
    """The mask's invariant through the method: with the retain term off, every entry of the step's gradient is 0
    or has the sign of the retain gradient's running mean (dropping the mask breaks it on many entries)."""
    batch = paired_batch(tiny_tokenizer)
    for mask in (True, False):
        method = build_method("mudman", {"alpha": 0.0, "mask": mask, "modules": ["all"]})
        for _ in range(2):
            got = grads(double_model, sum(method.loss(double_model, batch, None).values()))
        names = [n for n, _ in double_model.named_parameters()]
        against = sum(int(((g.sign() * a.sign()) < 0).sum()) for g, a in zip(got.values(), method.retain_acc))
        moved = sum(int((g != 0).sum()) for g in got.values())
        assert len(names) == len(method.retain_acc) and moved > 0
        assert (against == 0) if mask else (against > moved // 10), (mask, against, moved)


@pytest.mark.parametrize("loss_scale", [0.5, 4.0])
def test_normalisation_gives_the_unlearning_gradient_norm_gamma(double_model, tiny_tokenizer, loss_scale):
    """Unmasked, with the retain term off, the step's gradient has global norm gamma whatever the loss's scale (the
    scale stands in for a larger loss: the forget logits multiplied by it); unnormalised it grows with it."""
    batch = paired_batch(tiny_tokenizer)
    head = double_model.lm_head.weight
    with torch.no_grad():
        head.mul_(loss_scale)
    norms = {}
    for normalize in (True, False):
        method = build_method("mudman", {"gamma": 0.3, "alpha": 0.0, "mask": False, "normalize": normalize,
                                         "meta": False, "modules": ["all"]})
        got = grads(double_model, sum(method.loss(double_model, batch, None).values()))
        norms[normalize] = float(torch.sqrt(sum((g ** 2).sum() for g in got.values())))
        if not normalize:
            want = grads(double_model, neg_entropy(double_model, batch["forget"]))
            for n in got:
                torch.testing.assert_close(got[n], 0.3 * want[n], atol=1e-7, rtol=1e-6)
    assert norms[True] == pytest.approx(0.3, rel=1e-9)
    assert norms[False] != pytest.approx(0.3, rel=1e-3)


def test_neg_nll_loss_is_minus_the_forget_nll(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)
    method = build_method("mudman", {"loss": "neg_nll", "alpha": 0.0, "mask": False, "normalize": False,
                                     "meta": False, "modules": ["all"]})
    terms = method.loss(double_model, batch, None)
    want = -float(retain_nll(double_model, batch["forget"]).detach())
    assert float(terms["unlearn"].detach()) == pytest.approx(want, rel=1e-9)


def test_the_adversary_forks_from_theta_every_fork_every_steps(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)
    method = build_method("mudman", {"fork_every": 2, "adv_lr": 0.5, "modules": ["all"]})
    theta = [p.detach().clone() for p in double_model.parameters()]
    distance = []
    for _ in range(4):
        method.loss(double_model, batch, None)
        distance.append(float(global_norm([a - t for a, t in zip(method.adversary, theta)])))
    # steps 0 and 2 fork (then one SGD step), steps 1 and 3 take a second step from there
    assert distance[0] == pytest.approx(distance[2]) and distance[1] == pytest.approx(distance[3])
    assert 0 < distance[0] < distance[1]


def test_a_resumed_run_continues_the_adversary_and_the_retain_mean(double_model, tiny_tokenizer):
    batch = paired_batch(tiny_tokenizer)
    params = {"adv_lr": 0.5, "modules": ["all"]}
    straight = build_method("mudman", params)
    first = build_method("mudman", params)
    for m in (straight, first):
        m.loss(double_model, batch, None)
    resumed = build_method("mudman", params)
    resumed.load_scorer_state(first.scorer_state())
    want = grads(double_model, sum(straight.loss(double_model, batch, None).values()))
    got = grads(double_model, sum(resumed.loss(double_model, batch, None).values()))
    for n in want:
        torch.testing.assert_close(got[n], want[n], atol=0, rtol=0)


@pytest.mark.parametrize("arch,kind", [("llama", "gate_proj"), ("gpt2", "c_fc"), ("gptneox", "dense_h_to_4h")])
def test_it_trains_each_mlps_first_projection_by_default(tiny_tokenizer, arch, kind):
    model = tiny_random(arch, vocab_size=len(tiny_tokenizer), n_layer=2, max_len=64)
    names = build_method("mudman").trainable(model)
    assert names and all(f".{kind}." in n for n in names)
    assert {n.split(f".{kind}.")[0] for n in names} == {n.split(f".{kind}.")[0] for n, _ in model.named_parameters()
                                                         if f".{kind}." in n}  # every layer
    assert build_method("mudman", {"modules": ["all"]}).trainable(model) == ["*"]


@pytest.mark.parametrize("params,match", [({"loss": "entropy"}, "loss': must be one of neg_entropy, neg_nll"),
                                          ({"modules": ["mlp_inn"]}, "modules': unknown group 'mlp_inn'"),
                                          ({"modules": []}, "modules': give at least one"),
                                          ({"retain_momentum": 1.5}, "retain_momentum"),
                                          ({"fork_every": 0}, "fork_every")])
def test_bad_settings_are_one_line_naming_the_key(params, match):
    with pytest.raises(ConfigError, match=match):
        build_method("mudman", params)


def test_runs_on_the_world_base_model(world_base, fresh):
    before, after, _ = run_tiny("mudman", world_base, fresh, train={"steps": 5})
    assert after > before


@pytest.mark.parametrize("arch", ["gpt2", "qwen2"])
def test_runs_on_a_random_init_model_of_a_real_architecture(tiny_tokenizer, arch):
    run_on_random_arch("mudman", tiny_tokenizer, arch, steps=2)
