import json
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from obliviate.data import collate
from obliviate.errors import ConfigError
from obliviate.losses import lm_loss
from obliviate.train import loop
from obliviate.train import StepSampler, TrainConfig, TrainingDiverged, make_optimizer, train


def tiny(seed=0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(cfg)


def data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    seqs = [rng.integers(1, 50, size=rng.integers(5, 12)) for _ in range(n)]
    sampler = StepSampler(n, 4, seed)
    return lambda step: collate([seqs[i] for i in sampler(step)], 0)


class Killed(Exception):
    pass


def test_step_sampler_is_pure_function_of_step():
    s1, s2 = StepSampler(10, 3, 7), StepSampler(10, 3, 7)
    seq = [s1(i).tolist() for i in range(9)]
    assert [s2(i).tolist() for i in reversed(range(9))][::-1] == seq
    assert sorted(sum(seq[:3], [])) == sorted(set(sum(seq[:3], [])))  # no repeats within an epoch
    lengths = [10 * i + 1 for i in range(10)]  # example i has 10i + 1 tokens
    assert s1.step_tokens(lengths, 4) == [sum(lengths[j] for j in seq[k]) for k in range(4)]
    assert s1.step_tokens(lengths, 0) == []


def test_length_grouped_sampler_visits_each_example_once_per_epoch_with_less_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 200, size=1000)
    grouped = StepSampler(1000, 16, 3, lengths=lengths, group_chunk=20)
    plain = StepSampler(1000, 16, 3)
    epoch = [grouped(i) for i in range(grouped.per_epoch)]
    seen = np.concatenate(epoch)
    assert len(seen) == len(set(seen.tolist())) == grouped.per_epoch * 16
    pad = lambda s: np.mean([lengths[s(i)].max() - lengths[s(i)].mean() for i in range(s.per_epoch)])
    assert pad(grouped) < 0.3 * pad(plain)
    # still a pure function of the step, and shuffled: batch lengths are not monotone over the epoch
    again = StepSampler(1000, 16, 3, lengths=lengths, group_chunk=20)
    assert all((again(i) == epoch[i]).all() for i in reversed(range(grouped.per_epoch)))
    means = [lengths[b].mean() for b in epoch]
    assert not (np.all(np.diff(means) >= 0) or np.all(np.diff(means) <= 0))
    assert not (grouped(0) == grouped(grouped.per_epoch)).all()  # next epoch, new batches


def test_resume_is_exact(tmp_path):
    cfg = TrainConfig(steps=12, lr=1e-2, checkpoint_every=4, log_every=2, progress=False, warmup_steps=2)
    loss = lambda m, b, s: {"lm": lm_loss(m, b)}
    m_ref = tiny()
    train(m_ref, loss, data(), cfg, tmp_path / "ref")

    def killing(m, b, s):
        if s == 9:
            raise Killed
        return loss(m, b, s)

    m1 = tiny()
    with pytest.raises(Killed):
        train(m1, killing, data(), cfg, tmp_path / "run")
    m2 = tiny(seed=123)  # a fresh process would rebuild the model; weights come from the checkpoint
    m2.load_state_dict(tiny().state_dict())
    summary = train(m2, loss, data(), cfg, tmp_path / "run")
    assert summary["resumed_from"] == 8
    for (n, a), (_, b) in zip(m_ref.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), n
    lines = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    ref_lines = [json.loads(l) for l in (tmp_path / "ref" / "metrics.jsonl").read_text().splitlines()]
    assert [l["step"] for l in lines] == [l["step"] for l in ref_lines]
    assert lines[-1]["loss"] == ref_lines[-1]["loss"]


def test_named_terms_logged_and_frozen_params_untouched(tmp_path):
    m = tiny()
    before = {n: p.clone() for n, p in m.named_parameters()}
    cfg = TrainConfig(steps=3, lr=1e-2, log_every=1, progress=False, trainable=["*mlp.down_proj*"])
    train(m, lambda m, b, s: {"a": lm_loss(m, b), "b": 0.5 * lm_loss(m, b)}, data(), cfg, tmp_path)
    rec = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert {"a", "b", "loss", "lr"} <= set(rec)
    assert rec["loss"] == pytest.approx(rec["a"] + rec["b"], rel=1e-5)  # the float32 sum, rounded: ~1e-7
    for n, p in m.named_parameters():
        changed = not torch.equal(p, before[n])
        assert changed == ("mlp.down_proj" in n), n


def test_the_loop_steps_the_one_optimizer_factory(monkeypatch):
    cfg = TrainConfig(steps=2, lr=2e-3, beta1=0.8, beta2=0.9, weight_decay=0.1, progress=False)
    opt = make_optimizer([torch.nn.Parameter(torch.zeros(3))], cfg)
    assert type(opt) is torch.optim.AdamW
    assert {k: opt.defaults[k] for k in ("lr", "betas", "weight_decay")} == {"lr": 2e-3, "betas": (0.8, 0.9),
                                                                             "weight_decay": 0.1}
    made = []
    monkeypatch.setattr(loop, "make_optimizer", lambda params, c: made.append(c) or make_optimizer(params, c))
    train(tiny(), lambda m, b, s: {"lm": lm_loss(m, b)}, data(), cfg)
    assert made == [cfg]


def test_pattern_matching_nothing_is_an_error():
    with pytest.raises(ConfigError, match="no_such"):
        train(tiny(), lambda m, b, s: {"lm": lm_loss(m, b)}, data(),
              TrainConfig(steps=1, trainable=["no_such*"], progress=False))


def test_nan_loss_stops_with_step_and_term(tmp_path):
    cfg = TrainConfig(steps=10, checkpoint_every=2, log_every=1, progress=False)

    def loss(m, b, s):
        x = lm_loss(m, b)
        return {"lm": x, "bad": x * float("nan") if s == 4 else 0 * x}

    with pytest.raises(TrainingDiverged, match=r"'bad'.*step 5.*step_00000004"):
        train(tiny(), loss, data(), cfg, tmp_path)


@pytest.mark.parametrize("grad_clip", [1.0, 0.0])
def test_nan_gradient_with_finite_loss_stops_before_the_step(tmp_path, grad_clip):
    cfg = TrainConfig(steps=10, checkpoint_every=2, log_every=1, grad_clip=grad_clip, progress=False)

    def loss(m, b, s):
        x = lm_loss(m, b)
        return {"lm": x, "kink": torch.sqrt(0 * x) if s == 4 else 0 * x}  # value 0, gradient 0 * inf = NaN

    m = tiny()
    with pytest.raises(TrainingDiverged, match=r"gradient norm is nan at step 5.*step_00000004"):
        train(m, loss, data(), cfg, tmp_path)
    assert all(torch.isfinite(p).all() for p in m.parameters())


def test_grad_norm_is_logged_without_clipping(tmp_path):
    train(tiny(), lambda m, b, s: {"lm": lm_loss(m, b)}, data(),
          TrainConfig(steps=2, log_every=1, grad_clip=0.0, progress=False), tmp_path)
    recs = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in recs if "grad_norm" in r)
