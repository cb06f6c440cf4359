"""Membership-inference scores, AUC and PrivLeak (obliviate.eval.mia) against hand computations."""

import math
import zlib

import numpy as np
import pytest
import torch

from obliviate.errors import ConfigError, DataError
from obliviate.eval.mia import (
    ALL_SCORES,
    SCORES,
    gradnorm_scores,
    mia_auc,
    mia_metrics,
    mia_scores,
    min_k_plus_plus_score,
    priv_leak,
    reference_scores,
    token_logprob_stats,
)
from obliviate.models.builders import tiny_random
from obliviate.models.tokenizer import train_tokenizer
from obliviate.tasks import Data
from obliviate.train.finetune import FinetuneConfig, finetune

CORPUS = ["The cat sat on the mat.", "A dog ran in the park with a red ball.", "Birds fly south in the winter.",
          "The old man read the paper by the window."]
TEXT = CORPUS[0]  # 10 tokens with this tokenizer, + eos = 11 scored tokens


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CORPUS * 5, vocab_size=300)


@pytest.fixture(scope="module")
def model(tok):
    """In float64: the scores batch texts (padded) and the hand computations run one unpadded forward each, which
    round apart; in float64 by ~1e-15, far below the tolerances below."""
    return tiny_random("llama", vocab_size=len(tok), seed=0).double()


def manual(model, tok, text, prefix=None, eos=True):
    """By hand: one unpadded forward of [bos] + prefix + text + [eos]; per scored token, its log-prob and
    mu / sigma of log p(z) under the softmax, from the definitions."""
    ctx = [tok.bos_token_id] + (tok(prefix, add_special_tokens=False)["input_ids"] if prefix else [])
    cont = tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if eos else [])
    ids = ctx + cont
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1).numpy()
    lp, mu, sigma = [], [], []
    for t in range(len(ctx), len(ids)):  # token ids[t] is predicted at position t - 1
        row = logp[t - 1]
        p = np.exp(row)
        lp.append(row[ids[t]])
        m = float(np.sum(p * row))
        mu.append(m)
        sigma.append(math.sqrt(float(np.sum(p * (row - m) ** 2))))
    return cont, np.array(lp), np.array(mu), np.array(sigma)


# ------------------------------------------------------------------ token statistics

def test_token_stats_match_a_manual_forward(model, tok):
    cont, lp, mu, sigma = manual(model, tok, TEXT)
    # TEXT is scored among longer texts, so its row is right-padded in the batch
    stats = token_logprob_stats(model, tok, [CORPUS[1], TEXT, CORPUS[3]], batch_size=3)[1]
    assert stats["token_ids"].tolist() == cont and len(cont) == 11 and cont[-1] == tok.eos_token_id
    np.testing.assert_allclose(stats["token_logprobs"], lp, atol=1e-5)
    np.testing.assert_allclose(stats["mu"], mu, atol=1e-5)
    np.testing.assert_allclose(stats["sigma"], sigma, atol=1e-5)
    # mu is minus the entropy; sigma > 0 for a non-degenerate softmax
    assert (stats["mu"] < 0).all() and (stats["sigma"] > 0).all()


def test_prefix_scores_only_the_continuation(model, tok):
    prefix, cont_text = "The cat", " sat on the mat."
    cont, lp, mu, sigma = manual(model, tok, cont_text, prefix=prefix)
    stats = token_logprob_stats(model, tok, [cont_text, CORPUS[2]], prefixes=[prefix, None])[0]
    assert stats["token_ids"].tolist() == cont and len(cont) == 9  # 8 continuation tokens + eos
    np.testing.assert_allclose(stats["token_logprobs"], lp, atol=1e-5)
    np.testing.assert_allclose(stats["mu"], mu, atol=1e-5)
    np.testing.assert_allclose(stats["sigma"], sigma, atol=1e-5)


def test_add_eos_false_scores_no_eos(model, tok):
    cont, lp, _, _ = manual(model, tok, TEXT, eos=False)
    stats = token_logprob_stats(model, tok, [TEXT], add_eos=False)[0]
    assert stats["token_ids"].tolist() == cont and tok.eos_token_id not in cont
    np.testing.assert_allclose(stats["token_logprobs"], lp, atol=1e-5)


def test_batching_and_order_do_not_change_stats(model, tok):
    texts = CORPUS + ["Once upon a time there was a cat"]
    one = token_logprob_stats(model, tok, texts, batch_size=1)
    many = token_logprob_stats(model, tok, texts, batch_size=16)
    for a, b in zip(one, many):
        assert a["token_ids"].tolist() == b["token_ids"].tolist()
        for key in ("token_logprobs", "mu", "sigma"):
            np.testing.assert_allclose(a[key], b[key], atol=1e-5)


def test_long_examples_are_cut_with_a_warning(model, tok):
    prefix, cont_text = "A dog ran in the park", " sat on the mat."
    full_ctx = [tok.bos_token_id] + tok(prefix, add_special_tokens=False)["input_ids"]
    cont = tok(cont_text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    limit = 1 + 2 + len(cont)  # bos, the prefix's last 2 tokens, the continuation
    with pytest.warns(UserWarning, match="1 of 1 examples were cut"):
        stats = token_logprob_stats(model, tok, [cont_text], prefixes=[prefix], max_len=limit)[0]
    ids = [tok.bos_token_id] + full_ctx[-2:] + cont
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].double(), -1)
    want = [logp[t - 1, ids[t]].item() for t in range(3, len(ids))]
    np.testing.assert_allclose(stats["token_logprobs"], want, atol=1e-5)


def test_bad_inputs(model, tok):
    with pytest.raises(DataError, match="prefixes"):
        token_logprob_stats(model, tok, [TEXT, TEXT], prefixes=["a"])
    with pytest.raises(ConfigError, match="k must be"):
        mia_scores(model, tok, [TEXT], k=0)
    with pytest.raises(ConfigError, match="k must be"):
        mia_scores(model, tok, [TEXT], k=1.5)
    with pytest.raises(DataError, match="no token to score"):
        token_logprob_stats(model, tok, [""], add_eos=False)
    with pytest.raises(DataError, match="pair"):
        mia_metrics(model, tok, [TEXT, 3], [TEXT])
    assert token_logprob_stats(model, tok, []) == []


# ------------------------------------------------------------------ the four scores

def test_scores_match_hand_computation(model, tok):
    _, lp, mu, sigma = manual(model, tok, TEXT)
    n = len(lp)
    assert n == 11
    scores = mia_scores(model, tok, [CORPUS[1], TEXT], k=0.2, batch_size=2)
    assert set(scores) == set(SCORES) and all(v.shape == (2,) for v in scores.values())

    # LOSS: minus the mean token NLL
    mean_nll = -sum(lp) / n
    assert scores["loss"][1] == pytest.approx(-mean_nll, abs=1e-5)

    # zlib: minus the mean NLL over the compressed length in bytes
    z_len = len(zlib.compress(TEXT.encode("utf-8")))
    assert scores["zlib"][1] == pytest.approx(-mean_nll / z_len, abs=1e-5)

    # Min-20%: int(0.2 * 11) = 2 lowest log-probs
    lowest = np.argsort(lp)[:2]
    assert scores["min_k"][1] == pytest.approx((lp[lowest[0]] + lp[lowest[1]]) / 2, abs=1e-5)

    # Min-20%++: the 2 lowest normalised log-probs (lp - mu) / sigma
    z = [(lp[t] - mu[t]) / sigma[t] for t in range(n)]
    z_low = sorted(z)[:2]
    assert scores["min_k_plus_plus"][1] == pytest.approx(sum(z_low) / 2, abs=1e-5)


def test_min_k_extremes(model, tok):
    _, lp, mu, sigma = manual(model, tok, TEXT)
    tiny_k = mia_scores(model, tok, [TEXT], k=0.01)  # int(0.11) = 0 -> still one token: the minimum
    assert tiny_k["min_k"][0] == pytest.approx(lp.min(), abs=1e-5)
    assert tiny_k["min_k_plus_plus"][0] == pytest.approx(((lp - mu) / sigma).min(), abs=1e-5)
    all_k = mia_scores(model, tok, [TEXT], k=1.0)  # every token: Min-100% is the mean log-prob = -loss
    assert all_k["min_k"][0] == pytest.approx(all_k["loss"][0], abs=1e-9)
    assert all_k["min_k_plus_plus"][0] == pytest.approx(((lp - mu) / sigma).mean(), abs=1e-5)
    half = mia_scores(model, tok, [TEXT], k=0.5)  # int(5.5) = 5 tokens
    assert half["min_k"][0] == pytest.approx(np.sort(lp)[:5].mean(), abs=1e-5)


def test_zlib_of_a_pair_uses_the_continuation(model, tok):
    prefix, cont_text = "The cat", " sat on the mat."
    _, lp, _, _ = manual(model, tok, cont_text, prefix=prefix)
    scores = mia_scores(model, tok, [cont_text], prefixes=[prefix])
    assert scores["zlib"][0] == pytest.approx(lp.mean() / len(zlib.compress(cont_text.encode("utf-8"))), abs=1e-5)


# ------------------------------------------------------------------ AUC and PrivLeak

def test_mia_auc_on_hand_made_scores():
    assert mia_auc([3.0, 4.0, 5.0], [0.0, 1.0, 2.0]) == 1.0  # members above every non-member
    assert mia_auc([0.0, 1.0], [2.0, 3.0, 4.0]) == 0.0  # reversed
    assert mia_auc([1.0, 1.0], [1.0, 1.0, 1.0]) == 0.5  # all ties count one half
    # members [3, 1] vs non-members [2, 0]: 3 of the 4 (member, non-member) pairs ordered right
    assert mia_auc([3.0, 1.0], [2.0, 0.0]) == pytest.approx(0.75)
    assert mia_auc(np.array([2.0]), np.array([2.0, 1.0])) == pytest.approx(0.75)  # one tie, one win
    with pytest.raises(DataError, match="members and non-members"):
        mia_auc([], [1.0])
    with pytest.raises(DataError, match="finite"):
        mia_auc([float("nan")], [1.0])


def test_priv_leak_follows_muse():
    # MUSE: ((1 - AUC) - (1 - AUC_retrain)) / (1 - AUC_retrain), MUSE's AUC being 1 - ours
    assert priv_leak(0.5, 0.5) == pytest.approx(0.0)
    assert priv_leak(1.0, 0.5) == pytest.approx(-1.0)  # under-unlearned: forget still looks trained on
    assert priv_leak(0.25, 0.5) == pytest.approx(0.5)  # over-unlearned: forget looks less seen than unseen text
    # MUSE-News: AUC_RETRAIN = 0.4772 in MUSE's convention (0.5228 in ours); a target model at
    # AUC 0.999 (ours) gets MUSE's -99.79%
    assert priv_leak(0.999, 1 - 0.4772) == pytest.approx((0.001 - 0.4772) / 0.4772)
    with pytest.raises(DataError, match="undefined"):
        priv_leak(0.9, 1.0)
    with pytest.raises(DataError, match="AUC in"):
        priv_leak(1.5, 0.5)


# ------------------------------------------------------------------ sanity: a trained model leaks membership

NAMES = ["Alice", "Bruno", "Carmen", "Dmitri", "Elena", "Farid", "Greta", "Hiro",
         "Ines", "Jonas", "Kira", "Luca", "Mira", "Nils", "Olga", "Pavel"]
CITIES = ["Lisbon", "Oslo", "Quito", "Nairobi", "Hanoi", "Lima", "Porto", "Tunis",
          "Riga", "Perth", "Cusco", "Dakar", "Minsk", "Sofia", "Turin", "Kyoto"]
JOBS = ["baker", "pilot", "tailor", "nurse", "miner", "judge", "cook", "poet",
        "smith", "clerk", "guard", "sailor", "farmer", "dancer", "scribe", "potter"]


def test_trained_model_separates_members_and_random_model_does_not():
    """8 member and 8 non-member sentences of one template; a tiny llama fine-tuned on the members
    for 100 steps (100 epochs of one batch of 8, lr 3e-3).

    Measured: after training every AUC is 1.0 (loss, zlib, Min-K%, Min-K%++; the same for init
    seeds 0-5, GradNorm and the reference score too; also 1.0 scoring only the job word after "... worked
    as a"). Before training, seed 0 gives AUC 0.453 (loss), 0.547 (zlib), 0.609 (Min-K%), 0.578 (Min-K%++);
    the loss AUC of seeds 0-3 is 0.453, 0.297, 0.656, 0.547 (mean 0.488; seeds 4-7: 0.547, 0.625, 0.266,
    0.547, mean 0.496): with 8 + 8 examples the null AUC has a standard
    deviation of about 0.15, so the chance-level check is on seed 0 with the margin 0.25 and on the
    mean of four seeds with 0.15. GradNorm and the reference score (against the untrained model of seed 0)
    are 1.0 after training too; before it, seeds 0 and 1 give GradNorm 0.438 and 0.531.
    """
    sents = [f"{n} was born in {c} and worked as a {j}." for n, c, j in zip(NAMES, CITIES, JOBS)]
    members, nonmembers = sents[:8], sents[8:]
    tok = train_tokenizer(sents * 5, vocab_size=300)

    random_aucs = [mia_metrics(tiny_random("llama", vocab_size=len(tok), seed=s), tok, members, nonmembers)
                   for s in range(4)]
    assert abs(random_aucs[0]["mia_auc_loss"] - 0.5) <= 0.25
    assert abs(np.mean([r["mia_auc_loss"] for r in random_aucs]) - 0.5) <= 0.15

    model = tiny_random("llama", vocab_size=len(tok), seed=0)
    model, summary = finetune(model, tok, Data(docs=members), FinetuneConfig(epochs=100, lr=3e-3, batch_size=8),
                              progress=False)
    assert summary["finetune"]["steps"] == 100
    trained = mia_metrics(model, tok, members, nonmembers)
    assert set(trained) == {f"mia_auc_{s}" for s in SCORES}
    assert trained["mia_auc_loss"] > 0.8
    assert min(trained.values()) > 0.8
    # OpenUnlearning's six: GradNorm, and the reference score against the untrained model of the same seed
    six = mia_metrics(model, tok, members, nonmembers, gradnorm=True,
                      reference_model=tiny_random("llama", vocab_size=len(tok), seed=0))
    assert set(six) == {f"mia_auc_{s}" for s in ALL_SCORES}
    assert {k: six[k] for k in trained} == trained
    assert six["mia_auc_gradnorm"] > 0.8 and six["mia_auc_reference"] > 0.8
    # (prefix, continuation) pairs: only the job after "... worked as a" is scored
    def split(xs):
        return [(x[:x.rindex(" as a") + 5], x[x.rindex(" as a") + 5:]) for x in xs]

    assert mia_metrics(model, tok, split(members), split(nonmembers))["mia_auc_loss"] > 0.8


def test_min_k_plus_plus_clamps_the_variance_as_open_unlearning():
    # hand-computed: a near one-hot position (sigma 1e-5) divides by sqrt(1e-6) = 1e-3, not by 1e-5
    stats = {"token_logprobs": np.array([-0.01, -2.0]), "mu": np.array([-0.02, -3.0]), "sigma": np.array([1e-5, 0.5])}
    assert min_k_plus_plus_score(stats, k=1.0) == pytest.approx(((0.01 / 1e-3) + (1.0 / 0.5)) / 2)


# ------------------------------------------------------------------ GradNorm and the reference model

class Bigram(torch.nn.Module):
    """logits(x_t) = W[x_t] + b: two parameter tensors, both zero, so the softmax is uniform and the gradients
    have a closed form."""

    def __init__(self, vocab: int):
        super().__init__()
        self.W = torch.nn.Parameter(torch.zeros(vocab, vocab, dtype=torch.float64))  # float64: the closed form's
        self.b = torch.nn.Parameter(torch.zeros(vocab, dtype=torch.float64))

    def forward(self, input_ids, attention_mask=None):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.W[input_ids] + self.b)


def test_gradnorm_by_hand(tok):
    """With W = b = 0 every next-token distribution is uniform u = 1/V. The loss is the mean NLL of the scored
    tokens but the last (the eos), m of them, predicted at inputs x_t: grad_b = (1/m) sum_t (u - e_{y_t}) and row a
    of grad_W = (1/m) sum_{t: x_t = a} (u - e_{y_t}); g = the mean of the two tensors' norms."""
    V = len(tok)
    ids = [tok.bos_token_id] + tok(TEXT, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    inputs, targets = ids[:-2], ids[1:-1]  # the eos is scored but left out of GradNorm's loss
    m = len(targets)
    u = np.full(V, 1.0 / V)
    gb = sum(u - np.eye(V)[y] for y in targets) / m
    gW = np.zeros((V, V))
    for x, y in zip(inputs, targets):
        gW[x] += (u - np.eye(V)[y]) / m
    model = Bigram(V)
    for p, norm in ((2, lambda a: np.sqrt((a ** 2).sum())), (1, lambda a: np.abs(a).sum()),
                    (float("inf"), lambda a: np.abs(a).max())):
        got = gradnorm_scores(model, tok, [TEXT], p=p)
        assert got[0] == pytest.approx(-(norm(gW) + norm(gb)) / 2, rel=1e-6), p


def test_gradnorm_matches_a_manual_backward_and_restores_grads(model, tok):
    prefix, cont = "The cat", " sat on the mat."
    ctx = [tok.bos_token_id] + tok(prefix, add_special_tokens=False)["input_ids"]
    ans = tok(cont, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([ctx + ans])
    model.zero_grad()
    lp = torch.log_softmax(model(input_ids=ids).logits[0], -1)
    loss = -torch.stack([lp[t - 1, ids[0, t]] for t in range(len(ctx), len(ctx) + len(ans) - 1)]).mean()
    loss.backward()
    want = -float(torch.stack([q.grad.norm(p=2) for q in model.parameters() if q.grad is not None]).mean())
    marker = [torch.full_like(q, 7.0) for q in model.parameters()]
    for q, g in zip(model.parameters(), marker):
        q.grad = g.clone()
    model.train()
    got = gradnorm_scores(model, tok, [cont, CORPUS[2]], prefixes=[prefix, None])
    assert got[0] == pytest.approx(want, rel=1e-5) and got[1] != got[0]
    assert model.training  # mode restored
    assert all(torch.equal(q.grad, g) for q, g in zip(model.parameters(), marker))  # the caller's grads kept
    model.eval()
    model.zero_grad(set_to_none=True)
    with pytest.raises(ConfigError, match="p must be 1, 2 or inf"):
        gradnorm_scores(model, tok, [TEXT], p=3)


def test_reference_score_is_the_loss_difference(model, tok):
    ref = tiny_random("llama", vocab_size=len(tok), seed=5).double()
    _, lp, _, _ = manual(model, tok, TEXT)
    _, lp_ref, _, _ = manual(ref, tok, TEXT)
    got = reference_scores(model, ref, tok, [TEXT, CORPUS[1]])
    assert got[0] == pytest.approx(-lp_ref.mean() + lp.mean(), abs=1e-6)  # L_ref(x) - L(x)
    # the model as its own reference: every score 0, the AUC one half (all ties)
    same = mia_metrics(model, tok, CORPUS[:2], CORPUS[2:], reference_model=model)
    assert same["mia_auc_reference"] == 0.5 and "mia_auc_gradnorm" not in same
