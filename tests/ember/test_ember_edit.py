"""EMBER embedding edit, untie / snapshot / restore, metrics and delta selection."""

import pytest
import torch

from obliviate.methods.ember.edit import (
    apply_ember,
    efficacy,
    eligible_rows,
    eligible_tokens,
    ember_delta_rows,
    restore_embeddings,
    select_delta,
    snapshot_embeddings,
    specificity,
)
from obliviate.errors import ConfigError, DataError
from obliviate.eval.core import chance_corrected

VOCAB, D = 64, 32


def tiny(tie: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=D, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                      tie_word_embeddings=tie, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(cfg).eval()


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# --------------------------------------------------------------------------- eligibility and directions

G = torch.tensor([
    [1.0, 0.0, 0.0],  # code 1, only feature 0
    [0.0, 2.0, 0.0],  # code 1, only feature 1 (not selected)
    [0.0, 0.0, -1.0],  # code 1, feature 2
    [3.0, 0.0, 4.0],  # code 2 -> never eligible
    [5.0, 0.0, 0.0],  # code 0 -> never eligible
])
CODES = torch.tensor([1, 1, 1, 2, 0])
IDS = torch.tensor([10, 11, 12, 13, 14])


def test_eligible_rows_and_tokens():
    assert eligible_rows(G, CODES, [0, 2]).tolist() == [0, 2]
    assert eligible_tokens(G, CODES, IDS, [0, 2]).tolist() == [10, 12]
    assert eligible_tokens(G, CODES, IDS, [1]).tolist() == [11]
    assert eligible_tokens(G, CODES, IDS, []).tolist() == []
    with pytest.raises(ConfigError):
        eligible_rows(G, CODES, [3])


def test_delta_rows_hand_example():
    F = torch.tensor([[1.0, 10.0, 100.0], [2.0, 20.0, 200.0]])  # (d=2, K=3)
    # row 0: 1 * F[:,0] = (1, 2); row 2: -1 * F[:,2] = (-100, -200); row 3: 3 F[:,0] + 4 F[:,2] = (403, 806)
    out = ember_delta_rows(F, G, [0, 2], torch.tensor([0, 2, 3]))
    assert out.tolist() == [[1.0, 2.0], [-100.0, -200.0], [403.0, 806.0]]


# --------------------------------------------------------------------------- the edit


def test_edit_tied_model_changes_only_eligible_input_rows():
    model = tiny(tie=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    before = model.model.embed_tokens.weight.detach().clone()
    ids = [5, 9, 40]
    dirs = torch.randn(3, D, generator=torch.Generator().manual_seed(1))
    x = torch.tensor([[1, 3, 7, 20, 33]])  # no edited token in the input
    logits_before = model(x).logits

    rec = apply_ember(model, ids, dirs, delta=2.0)

    emb = model.model.embed_tokens.weight.detach()
    others = [t for t in range(VOCAB) if t not in ids]
    assert torch.equal(emb[others], before[others])  # bit-identical
    assert torch.allclose(emb[ids], before[ids] - 2.0 * dirs)
    assert not torch.equal(emb[ids], before[ids])
    # output side untouched and no longer shared
    assert model.lm_head.weight is not model.model.embed_tokens.weight
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(model.lm_head.weight, before)
    assert model.config.tie_word_embeddings is False
    assert torch.equal(model(x).logits, logits_before)  # inputs without edited tokens: same logits
    assert rec.untied and rec.token_ids == ids and rec.delta == 2.0
    assert rec.vocab_fraction_edited == 3 / 64
    # a later tie_weights() call must not re-tie (the edit would leak into lm_head)
    model.tie_weights()
    assert torch.equal(model.lm_head.weight, before)


def test_restore_brings_back_every_parameter_and_reties():
    model = tiny(tie=True)
    ref = state(model)
    snap = snapshot_embeddings(model)
    apply_ember(model, [4, 8], torch.ones(2, D), delta=50.0)
    restore_embeddings(model, snap)
    now = model.state_dict()
    assert now.keys() == ref.keys()
    assert all(torch.equal(now[k], ref[k]) for k in ref)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.config.tie_word_embeddings is True
    if hasattr(model, "all_tied_weights_keys"):  # transformers >= 5 keeps a record of tied parameters
        assert model.all_tied_weights_keys == {"lm_head.weight": "model.embed_tokens.weight"}
    # a second edit after the restore unties again
    assert apply_ember(model, [4], torch.ones(1, D), delta=1.0).untied


def test_untied_model_keeps_its_lm_head_and_restores():
    model = tiny(tie=False)
    ref = state(model)
    snap = snapshot_embeddings(model)
    rec = apply_ember(model, [3], torch.ones(1, D), delta=1.0)
    assert not rec.untied
    assert torch.equal(model.lm_head.weight, ref["lm_head.weight"])
    assert not torch.equal(model.model.embed_tokens.weight, ref["model.embed_tokens.weight"])
    restore_embeddings(model, snap)
    assert all(torch.equal(v, ref[k]) for k, v in model.state_dict().items())


def test_edit_survives_save_and_reload(tmp_path):
    from transformers import LlamaForCausalLM

    model = tiny(tie=True)
    before = model.model.embed_tokens.weight.detach().clone()
    apply_ember(model, [6], torch.ones(1, D), delta=1.0)
    model.save_pretrained(tmp_path)
    again = LlamaForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(again.lm_head.weight, before)
    assert torch.equal(again.model.embed_tokens.weight, model.model.embed_tokens.weight)


def test_edit_rejects_bad_input():
    model = tiny(tie=True)
    with pytest.raises(ConfigError):
        apply_ember(model, [3, 3], torch.ones(2, D), 1.0)
    with pytest.raises(ConfigError):
        apply_ember(model, [VOCAB], torch.ones(1, D), 1.0)
    with pytest.raises(DataError):
        apply_ember(model, [3], torch.ones(2, D), 1.0)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # nothing untied on error


def test_empty_edit_is_a_no_op_on_weights():
    model = tiny(tie=False)
    ref = state(model)
    rec = apply_ember(model, [], torch.zeros(0, D), 10.0)
    assert rec.vocab_fraction_edited == 0.0
    assert all(torch.equal(v, ref[k]) for k, v in model.state_dict().items())


# --------------------------------------------------------------------------- metrics and delta choice


def test_metric_helpers_hand_values():
    assert chance_corrected(0.55, 0.65, 0.25) == pytest.approx(0.75)  # (0.30 / 0.40)
    assert chance_corrected(0.20, 0.65, 0.25) == 0.0  # below chance -> clipped
    assert chance_corrected(0.70, 0.65, 0.25) == 1.0  # above base -> clipped
    assert chance_corrected(0.5, 0.25, 0.25) == 0.0  # base at chance
    assert efficacy(0.35, 0.65) == pytest.approx(0.75)  # 1 - 0.10 / 0.40
    # HM(0.75, 0.5) = 2 * 0.375 / 1.25 = 0.6
    assert specificity(0.55, 0.65, 0.45, 0.65) == pytest.approx(0.6)


def _row(delta, e, s, c, u):
    return dict(delta=delta, efficacy=e, specificity=s, coherence=c, utility=u)


def test_select_delta_best_hm_under_utility_floor():
    rows = [
        _row(0.5, 0.2, 1.0, 1.0, 0.60),   # HM = 3/(5+1+1) = 0.4286
        _row(5, 0.6, 0.9, 0.9, 0.55),     # HM = 3/(1.667+1.111+1.111) = 0.7714
        _row(50, 0.9, 0.8, 0.8, 0.53),    # utility 0.53 < 0.9 * 0.6 = 0.54: excluded
        _row(3, 1.0, 1.0, 1.0, 0.60),     # off grid: ignored
    ]
    choice = select_delta(rows, base_utility=0.6)
    assert choice.delta == 5 and choice.qualified
    assert choice.score == pytest.approx(3 / (1 / 0.6 + 2 / 0.9))


def test_select_delta_ties_go_to_smaller_delta_and_fallback():
    rows = [_row(10, 0.5, 0.5, 0.5, 1.0), _row(2, 0.5, 0.5, 0.5, 1.0)]
    assert select_delta(rows, base_utility=1.0).delta == 2
    low = [_row(10, 0.9, 0.9, 0.9, 0.1), _row(1, 0.1, 0.9, 0.9, 0.2)]
    choice = select_delta(low, base_utility=1.0)
    assert choice.delta == 1 and not choice.qualified and "smallest" in choice.reason
    with pytest.raises(ConfigError):
        select_delta([_row(3, 1, 1, 1, 1)], base_utility=1.0)  # nothing on the grid
    with pytest.raises(ConfigError):
        select_delta([dict(delta=1, efficacy=1)], base_utility=1.0)
