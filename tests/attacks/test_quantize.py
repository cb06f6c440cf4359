import pytest
import torch
from torch import nn

from obliviate.attacks.quantize import (NF4_CODE, fake_quantize, nf4_quantize, quantize_attack, quantized_copy,
                                        rtn_quantize)
from obliviate.attacks.scoring import scoring_task
from obliviate.errors import ConfigError
from obliviate.models.layers import input_embeddings, output_embeddings
from obliviate.tasks.world import task_from_world


@pytest.mark.parametrize("bits,group", [(8, None), (4, None), (8, 128), (4, 128)])
def test_round_to_nearest_errs_at_most_half_a_step(bits, group):
    w = torch.randn(6, 300, generator=torch.Generator().manual_seed(0))  # 300 = 2 full groups + 44 padded
    q, scale = rtn_quantize(w, bits, group)
    qmax = 2 ** (bits - 1) - 1
    assert q.abs().max() <= qmax
    n_groups = 1 if group is None else 3
    assert scale.shape == (6, n_groups, 1)
    deq = fake_quantize(w, f"int{bits}" + ("_g128" if group else ""))
    step = scale.expand(6, n_groups, group or 300).reshape(6, -1)[:, :300]
    assert deq.shape == w.shape
    assert ((w - deq).abs() <= step / 2 + 1e-7).all()
    # the largest value of each row (group) is exact: absmax / scale = qmax
    assert torch.allclose(deq.abs().amax(1), w.abs().amax(1)) if group is None else True


def test_round_to_nearest_hand_computed():
    # absmax 1.4 -> int4 scale 0.2: 0.25 -> round(1.25) = 1 -> 0.2; -1.4 -> -7 -> -1.4; 0.31 -> round(1.55) = 2 -> 0.4
    w = torch.tensor([[0.25, -1.4, 0.31, 0.0]])
    assert torch.allclose(fake_quantize(w, "int4"), torch.tensor([[0.2, -1.4, 0.4, 0.0]]))


def test_nf4_code_is_the_published_16_values():
    assert len(NF4_CODE) == 16 and list(NF4_CODE) == sorted(NF4_CODE)
    assert NF4_CODE[0] == -1.0 and NF4_CODE[-1] == 1.0 and 0.0 in NF4_CODE
    assert sum(v < 0 for v in NF4_CODE) == 7 and sum(v > 0 for v in NF4_CODE) == 8
    assert NF4_CODE[1] == pytest.approx(-0.6961928) and NF4_CODE[8] == pytest.approx(0.0795803)
    # symmetric-ish: the positive side has one value more, and each negative magnitude below 1 lies between
    # two neighbouring positive values (0.0911 in (0.0796, 0.1609), ..., 0.6962 in (0.5626, 0.7230))
    neg, pos = sorted(-v for v in NF4_CODE if v < 0), sorted(v for v in NF4_CODE if v > 0)
    assert neg[-1] == pos[-1] == 1.0
    assert all(pos[i] < n < pos[i + 1] for i, n in enumerate(neg[:-1]))


def test_nf4_maps_each_value_to_the_nearest_code_times_absmax():
    w = torch.tensor([[2.0, -2.0, 0.0, 0.1, 1.0, -0.7]])  # absmax 2: w/2 = 1, -1, 0, .05, .5, -.35
    idx, absmax = nf4_quantize(w)
    assert absmax.flatten().tolist() == [2.0]
    # nearest codes: .05 -> 0.0796 (not 0), .5 -> 0.4407 (not 0.5626), -.35 -> -0.3949 (not -0.2844)
    want = [1.0, -1.0, 0.0, 0.07958029955625534, 0.44070982933044434, -0.39491748809814453]
    assert torch.allclose(fake_quantize(w, "nf4"), 2 * torch.tensor([want]))


def test_quantized_copy_leaves_the_model_and_the_embeddings_alone(tiny_model, unchanged):
    check = unchanged(tiny_model)
    q = quantized_copy(tiny_model, "int4")
    check()
    assert torch.equal(input_embeddings(q).weight, input_embeddings(tiny_model).weight)
    assert torch.equal(output_embeddings(q).weight, output_embeddings(tiny_model).weight)
    qn = dict(q.named_modules())
    for name, m in tiny_model.named_modules():
        if isinstance(m, nn.Linear) and m is not output_embeddings(tiny_model):
            assert not torch.equal(qn[name].weight, m.weight), name
        if "norm" in type(m).__name__.lower():
            assert torch.equal(qn[name].weight, m.weight), name


def test_the_attack_scores_each_scheme_and_keeps_the_best(small_world, world_tokenizer, world_model, unchanged):
    task = task_from_world(small_world)
    check = unchanged(world_model)
    res = quantize_attack(world_model, world_tokenizer, task, schemes=("int8", "nf4"))
    check()
    assert res["quantize_scheme"] in ("int8", "nf4")
    assert res["quantize_forget_score"] == max(res["quantize_int8_forget_score"], res["quantize_nf4_forget_score"])
    assert "quantize_nf4_retain_score" in res
    assert res["quantize_cost"]["forwards"] > 0 and res["quantize_cost"]["backwards"] == 0
    assert (res["quantize_items"], res["quantize_variants"]) == (12, 2)  # the world's 12 forget QA, the best of 2


def test_unknown_scheme_is_refused():
    with pytest.raises(ConfigError, match="int3"):
        fake_quantize(torch.ones(2, 2), "int3")


def test_a_bad_scheme_list_fails_before_any_scoring(small_world, world_tokenizer, world_model, monkeypatch):
    monkeypatch.setattr("obliviate.attacks.quantize.evaluate_task", lambda *a, **k: pytest.fail("scored"))
    with pytest.raises(ConfigError, match="quantize_schemes.*int3"):
        quantize_attack(world_model, world_tokenizer, task_from_world(small_world), schemes=("int4", "int3"))


def test_a_weight_confined_to_its_rounding_cell_quantizes_to_the_base_models_codes(world_model):
    """The small-norm control's confinement: any update clamped into the base weights' int4 cells (absmax elements
    fixed) is rounded back to exactly the base model's int4 weights, however large it was before clamping."""
    from obliviate.evidence.controls import confine_to, rounding_cells
    from obliviate.attacks.quantize import quantizable

    base = world_model
    moved = quantized_copy(base, "int8")  # any copy; its weights are then pushed far off
    torch.manual_seed(0)
    with torch.no_grad():
        for _, m in quantizable(moved):
            m.weight.add_(torch.randn_like(m.weight) * 0.5)
    confine_to(moved, rounding_cells(base, "int4"))
    qb, qm = quantized_copy(base, "int4"), quantized_copy(moved, "int4")
    mods = dict(quantizable(qm))
    assert mods
    for name, m in quantizable(qb):
        assert torch.equal(m.weight, mods[name].weight), name
    changed = sum(int((a.weight != b.weight).sum()) for (_, a), (_, b) in zip(quantizable(base), quantizable(moved)))
    assert changed > 0  # the confined copy is not the base model itself
    with pytest.raises(ConfigError, match="confine"):
        rounding_cells(base, "nf4")


def test_the_small_norm_control_stops_when_the_answers_vanish_and_rounds_back_to_the_base(taught, unchanged):
    from obliviate.evidence.controls import small_norm_control
    from obliviate.attacks.scoring import qa_score_fn
    from obliviate.attacks.quantize import quantizable

    model, tok, task = taught["model"], taught["tokenizer"], taught["task"]
    check = unchanged(model)
    control, info = small_norm_control(model, tok, task, lr=3e-4, chunk=4, max_steps=200)
    check()
    score = qa_score_fn(tok, task, list(task.forget.qa))
    assert score(model) == 1.0 and info["forget_prefix_acc"] == score(control) <= 0.1
    assert info["steps"] % 4 == 0 and 0 < info["steps"] < 200  # stopped at the first chunk that hid them
    assert 0 < info["update_rel_norm"] < 1 and info["confine"] == "int4"
    assert info["method"] == "graddiff" and info["retain_weight"] > 0  # the retain pairs are kept (issue #41)
    assert set(info["keep"]) == {"retain"} and info["keep_scores"]["retain"]["base"] == 1.0
    assert [c["steps"] for c in info["curve"]] == list(range(0, info["steps"] + 1, 4))
    qb, qc = dict(quantizable(quantized_copy(model, "int4"))), dict(quantizable(quantized_copy(control, "int4")))
    for name, m in qb.items():  # every update lies in its rounding cell: int4 gives back the base's weights
        assert torch.equal(m.weight, qc[name].weight), name


def test_the_counts_are_the_forget_items_scored_and_the_schemes_the_best_is_taken_over(
        small_world, world_tokenizer, world_model, cut_forget):
    """A forget set cut to 5 items reads 5 (not the world's 12, nor max_eval); a scheme named twice is one model."""
    task = scoring_task(cut_forget(task_from_world(small_world), 5))
    res = quantize_attack(world_model, world_tokenizer, task, schemes=("int8", "int4", "int8"))
    assert (res["quantize_items"], res["quantize_variants"]) == (5, 2)
    assert res["quantize_items"] == res[f"quantize_{res['quantize_scheme']}_forget_items"]
