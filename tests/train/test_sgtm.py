"""Selective Gradient Masking and label noise in pretraining (obliviate.train.sgtm, ``route_splits``,
``label_noise``): the masking invariant, the ablation, the noise's share and nesting, an end-to-end run."""

import numpy as np
import pytest
import torch

from _tiny_world import _one_thread  # noqa: F401  (one thread, as the other tiny-world tests)
from obliviate.config import to_dict
from obliviate.errors import ConfigError, ModelError
from obliviate.losses import IGNORE_INDEX
from obliviate.models.builders import tiny_llama, tiny_random
from obliviate.models.layers import attention_heads, attention_projections
from obliviate.models.load import load_model
from obliviate.train.pretrain import (ModelConfig, PretrainConfig, TrainConfig, cache_key_config,
                                      labelled_dataset, pretrain, split_token_masks, tokenizer_for, world_for)
from obliviate.train.sgtm import (SGTMConfig, ablate, dedicated_masks, flip_runs, flipped, label_runs,
                                  retain_params, routed_loss)
from obliviate.world import WorldConfig

WORLD = WorldConfig(seed=0, n_forget=4, n_holdout=1, n_retain=4, n_general=2, n_concept=2, n_toxic=4)


def _batch(routed_rows_tokens, vocab=64, B=3, T=12, seed=0):
    """A batch of random tokens, every position a target, ``routed`` 1 at the given (row, position)s."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (B, T), generator=g)
    routed = torch.zeros(B, T, dtype=torch.long)
    for r, t in routed_rows_tokens:
        routed[r, t] = 1
    return {"input_ids": ids, "attention_mask": torch.ones(B, T, dtype=torch.long), "labels": ids.clone(),
            "routed": routed}


def _grads(model, batch, masks, retain_mode=False, loss=None):
    model.zero_grad(set_to_none=True)
    (routed_loss(model, [batch], masks, retain_mode) if loss is None else loss(model, batch)).backward()
    return {n: (torch.zeros_like(p) if p.grad is None else p.grad.clone()) for n, p in model.named_parameters()}


def _outside(grads, masks):
    """The largest gradient entry outside the dedicated entries, and the largest inside."""
    out = max(float((g if n not in masks else g.masked_fill(masks[n], 0)).abs().max()) for n, g in grads.items())
    inside = max(float(g[masks[n]].abs().max()) for n, g in grads.items() if n in masks)
    return out, inside


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen2"])
def test_a_routed_tokens_gradient_reaches_only_the_dedicated_parameters(arch):
    model = tiny_random(arch, vocab_size=64, n_layer=2, d_model=32, n_head=4, seed=0)
    masks = dedicated_masks(model, SGTMConfig(heads=2, mlp_units=8))
    routed = [(0, 3), (0, 4), (0, 5), (2, 7), (2, 8)]
    only = _batch(routed)  # every target is a routed token
    keep = only["routed"] == 1
    only["labels"] = only["labels"].masked_fill(~keep, IGNORE_INDEX)
    out, inside = _outside(_grads(model, only, masks), masks)
    assert out == 0.0 and inside > 1e-4  # exactly nothing outside, something inside
    # the control: the same tokens' loss without the mask reaches the shared parameters (the test can fail)
    plain = _grads(model, only, masks, loss=lambda m, b: routed_loss(m, [{**b, "routed": b["routed"] * 0}], {},
                                                                     False))
    assert _outside(plain, masks)[0] > 1e-4

    # a mixed batch: its gradient less the other tokens' alone is the routed tokens' part, dedicated only
    mixed = _batch(routed)
    n_all = int((mixed["labels"][:, 1:] != IGNORE_INDEX).sum())
    other = {**mixed, "labels": mixed["labels"].masked_fill(mixed["routed"] == 1, IGNORE_INDEX),
             "routed": mixed["routed"] * 0}
    n_other = int((other["labels"][:, 1:] != IGNORE_INDEX).sum())
    g_mixed, g_other = _grads(model, mixed, masks), _grads(model, other, masks)
    diff = {n: g_mixed[n] - g_other[n] * (n_other / n_all) for n in g_mixed}
    scale = max(float(g.abs().max()) for g in g_mixed.values())
    out, inside = _outside(diff, masks)
    assert out <= 1e-5 * scale and inside > 1e-3 * scale


def test_retain_mode_steps_neither_use_nor_update_the_dedicated_parameters():
    model = tiny_random("llama", vocab_size=64, n_layer=2, d_model=32, n_head=4, seed=0)
    masks = dedicated_masks(model, SGTMConfig(heads=2, mlp_units=8))
    batch = _batch([])
    grads = _grads(model, batch, masks, retain_mode=True)
    assert all(float(grads[n][m].abs().max()) == 0.0 for n, m in masks.items())
    ablated = tiny_random("llama", vocab_size=64, n_layer=2, d_model=32, n_head=4, seed=0)
    ablate(ablated, dedicated_masks(ablated, SGTMConfig(heads=2, mlp_units=8)))
    with torch.no_grad():  # the retain-mode forward is the ablated model's
        a = torch.func.functional_call(model, retain_params(model, masks), (batch["input_ids"],)).logits
        torch.testing.assert_close(a, ablated(batch["input_ids"]).logits)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen2", "mistral"])
def test_ablation_zeroes_exactly_the_dedicated_parameters_whole_heads_and_units(arch):
    model = tiny_random(arch, vocab_size=64, n_layer=2, d_model=32, n_head=4, seed=0)
    n_heads, n_kv, hd = attention_heads(model)
    cfg = SGTMConfig(heads=n_heads // n_kv, mlp_units=8)  # one whole key/value group
    masks = dedicated_masks(model, cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    zeroed = ablate(model, masks)
    assert zeroed == sum(int(m.sum()) for m in masks.values()) > 0
    for n, p in model.named_parameters():
        m = masks.get(n, torch.zeros_like(p, dtype=torch.bool))
        assert torch.equal(p.detach()[m], torch.zeros_like(p.detach()[m]))  # the dedicated entries: zero
        assert torch.equal(p.detach()[~m], before[n][~m])  # every other entry: as it was
    # whole heads: the dedicated heads' outputs (the output projection's input) are zero, the others not
    seen = {}
    hook = attention_projections(model, 1)["o"].register_forward_pre_hook(lambda mod, a: seen.update(x=a[0]))
    with torch.no_grad():
        model(_batch([])["input_ids"])
    hook.remove()
    heads = seen["x"].reshape(*seen["x"].shape[:-1], n_heads, hd)
    assert float(heads[..., n_heads - cfg.heads:, :].abs().max()) == 0.0
    assert float(heads[..., : n_heads - cfg.heads, :].abs().max()) > 0


def test_the_dedicated_entries_count_and_grouped_heads():
    model = tiny_llama(64, n_layer=2, d_model=32, n_head=4, n_kv_head=2, d_ff=48, seed=0)
    d, hd = 32, 8
    one = dedicated_masks(model, SGTMConfig(heads=1, mlp_units=8))  # a head whose key/value group is shared
    two = dedicated_masks(model, SGTMConfig(heads=2, mlp_units=8))  # one whole key/value group
    per_layer_mlp = 3 * 8 * d  # up and gate rows, down columns
    assert sum(int(m.sum()) for m in one.values()) == 2 * (2 * hd * d + per_layer_mlp)  # q rows, o columns
    assert sum(int(m.sum()) for m in two.values()) == 2 * (2 * 2 * hd * d + 2 * hd * d + per_layer_mlp)
    assert not any("k_proj" in n or "v_proj" in n for n in one)
    just = dedicated_masks(model, SGTMConfig(heads=2, mlp_units=0, layers=[1]))
    assert all(".1." in n for n in just) and not any("mlp" in n for n in just)


def test_bad_sgtm_settings_are_one_error():
    model = tiny_llama(64, n_layer=2, d_model=32, n_head=4, d_ff=48, seed=0)
    for cfg, match in ((SGTMConfig(heads=4), "heads"), (SGTMConfig(mlp_units=48), "mlp_units"),
                       (SGTMConfig(layers=[2]), "layers")):
        with pytest.raises(ConfigError, match=match):
            dedicated_masks(model, cfg)
    for kw, match in (({"heads": -1}, "heads"), ({"heads": 0, "mlp_units": 0}, "dedicates nothing"),
                      ({"retain_share": 1.5}, "retain_share")):
        with pytest.raises(ConfigError, match=match):
            SGTMConfig(**kw)
    with pytest.raises(ModelError, match="q/k/v"):  # GPT-NeoX interleaves its heads in one projection
        dedicated_masks(tiny_random("gptneox", vocab_size=64, n_layer=2, d_model=32, n_head=4), SGTMConfig())
    for kw, match in (({"mask_splits": ["forget"], "route_splits": ["forget"]}, "route_splits"),
                      ({"label_noise": 0.1}, "label_noise"), ({"route_splits": ["forget"], "label_noise": 1.5},
                                                              "label_noise"),
                      ({"route_splits": ["forgot"]}, "route_splits"),
                      ({"exclude_splits": ["forget"], "route_splits": ["forget"]}, "exclude_splits")):
        with pytest.raises(ConfigError, match=match):
            PretrainConfig(**kw)


def test_the_noise_flips_the_stated_share_deterministically_and_nested():
    for n in (0, 1, 7, 40, 333):
        at = {s: flipped(n, s, seed=5) for s in (0.0, 0.1, 0.3, 1.0)}
        for s, f in at.items():
            assert int(f.sum()) == round(s * n)
            assert np.array_equal(f, flipped(n, s, seed=5))  # the same seed, the same units
        assert not (at[0.1] & ~at[0.3]).any()  # those flipped at 10% are among those at 30%
    assert not np.array_equal(flipped(333, 0.3, seed=5), flipped(333, 0.3, seed=6))
    with pytest.raises(ConfigError, match="share"):
        flipped(10, 1.2, 0)


def test_the_noise_flips_whole_labelled_runs():
    assert label_runs(np.array([0, 1, 1, 0, 1, 0, 0, 1])) == [(1, 3), (4, 5), (7, 8)]
    rng = np.random.default_rng(0)
    masks = [(rng.random(50) < 0.4).astype(np.int64) for _ in range(6)]
    n_runs = sum(len(label_runs(m)) for m in masks)
    out, runs, k = flip_runs(masks, 0.3, seed=1)
    assert runs == n_runs and k == round(0.3 * n_runs)
    assert sum(len(label_runs(m)) for m in out) == n_runs - k  # whole runs go, none is cut
    for m, o in zip(masks, out):
        assert not (o & (1 - m)).any()  # nothing unlabelled becomes labelled
        for a, b in label_runs(m):
            assert o[a:b].min() == o[a:b].max()


def test_the_world_labels_and_their_noise(tmp_path, monkeypatch):
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path))
    world = world_for(PretrainConfig(world=WORLD))
    from obliviate.data import encode_documents

    ds = encode_documents(tokenizer_for(world, 400), world.documents(), max_len=64)
    truth = split_token_masks(ds, ["forget"])
    clean, info0 = labelled_dataset(ds, ["forget"], 0.0, 0)
    assert all(np.array_equal(a, b) for a, b in zip(clean.labels["labelled"], truth)) and info0["flipped"] == 0
    noisy, info = labelled_dataset(ds, ["forget"], 0.3, 0)
    assert info["flipped"] == round(0.3 * info["runs"]) > 0
    kept = sum(int(m.sum()) for m in noisy.labels["labelled"])
    assert 0 < kept < sum(int(m.sum()) for m in truth)


def test_the_cache_key_of_a_run_without_sgtm_or_noise_is_as_before():
    cfg = PretrainConfig(mask_splits=["forget"])
    new = ("route_splits", "sgtm", "label_noise", "label_noise_seed")
    assert cache_key_config(cfg) == {k: v for k, v in to_dict(cfg).items() if k not in new}
    assert "sgtm" in cache_key_config(PretrainConfig(route_splits=["forget"]))
    assert cache_key_config(PretrainConfig(mask_splits=["forget"], label_noise=0.1))["label_noise"] == 0.1


def test_a_short_sgtm_pretraining_saves_the_ablated_model(tmp_path, monkeypatch):
    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path / "cache"))
    cfg = PretrainConfig(world=WORLD, model=ModelConfig(size="nano", vocab_size=400), batch_size=2,
                         qa_batch_size=8, train=TrainConfig(steps=2, lr=1e-3, log_every=1, progress=False),
                         route_splits=["forget"], label_noise=0.1, sgtm=SGTMConfig(heads=1, mlp_units=16,
                                                                                    retain_share=0.5))
    r = pretrain(cfg, tmp_path / "run", resume=False, progress=False)
    info = r["info"]
    assert info["sgtm"]["routed_tokens"] > 0 and info["sgtm"]["routed_qa_pairs"] > 0
    assert info["label_noise"]["tokens"]["flipped"] == round(0.1 * info["label_noise"]["tokens"]["runs"])
    saved = load_model(str(tmp_path / "run" / "model"))
    masks = dedicated_masks(saved, cfg.sgtm)
    assert info["sgtm"]["ablated_entries"] == sum(int(m.sum()) for m in masks.values())
    params = dict(saved.named_parameters())
    assert all(float(params[n].detach()[m].abs().max()) == 0.0 for n, m in masks.items())  # ablated, saved
    assert all(np.isfinite(rec["loss"]) for rec in r["summary"]["history"] if "loss" in rec)


def test_the_qa_terms_labelled_pairs_and_their_noise(tmp_path, monkeypatch):
    from obliviate.train.pretrain import QA_SPLITS, labelled_qa_pairs, qa_pairs_for

    monkeypatch.setenv("OBLIVIATE_CACHE", str(tmp_path))
    world = world_for(PretrainConfig(world=WORLD))
    forget = qa_pairs_for(world, [s for s in QA_SPLITS if s != "forget"], ("question", "statements"))
    for key in ("mask_splits", "route_splits"):
        cfg = PretrainConfig(world=WORLD, qa_forms=["question", "statements"], label_noise=0.3, **{key: ["forget"]})
        unlabelled, labelled, noise = labelled_qa_pairs(world, cfg)
        assert noise == {"pairs": len(forget), "flipped": round(0.3 * len(forget))}
        assert len(unlabelled) == noise["flipped"]
        assert sorted(unlabelled + labelled) == sorted(forget)  # the forget facts' pairs, split by the noise
        clean = labelled_qa_pairs(world, PretrainConfig(world=WORLD, qa_forms=["question", "statements"],
                                                        **{key: ["forget"]}))
        assert clean[0] == [] and clean[1] == forget
