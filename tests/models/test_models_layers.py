import copy
import pytest
import torch

from obliviate.errors import ConfigError, ModelError
from obliviate.models import layers as L
from obliviate.models.builders import ARCHS, tiny_random

N_LAYERS, D, D_FF = 3, 32, 64  # tiny_random geometry


def _hook_counts(m):
    # HF installs its own persistent hooks (output_hidden_states recording), so compare counts.
    return [(len(x._forward_hooks), len(x._forward_pre_hooks)) for x in L.decoder_layers(m)] + [
        (len(L.mlp_down_proj(m, l)._forward_hooks), len(L.mlp_down_proj(m, l)._forward_pre_hooks))
        for l in range(N_LAYERS)
    ]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 128, (2, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # right padding in the second row
    return ids, mask


@pytest.fixture(scope="module", params=ARCHS)
def arch_model(request):
    """Each architecture's tiny model, in float64: the tests below compare the layer locator's computations with
    Hugging Face's (logits at some positions against all of them, one loss three ways), which round apart."""
    m = tiny_random(request.param).double()
    with torch.no_grad():  # HF installs its own output-recording hooks on the first call
        m(input_ids=torch.tensor([[3, 4]]), output_hidden_states=True)
    return request.param, m


def test_decoder_layers(arch_model):
    _, m = arch_model
    assert len(L.decoder_layers(m)) == L.num_layers(m) == m.config.num_hidden_layers == N_LAYERS
    assert L.layer(m, 2) is L.decoder_layers(m)[2]


def test_layer_out_of_range_names_index(arch_model):
    _, m = arch_model
    with pytest.raises(ModelError, match=r"layer 9 out of range for a 3-layer model \(valid: 0\.\.2\)"):
        L.check_layer(m, 9)
    with pytest.raises(ModelError, match="layer -1"):
        L.mlp_down_proj(m, -1)
    with pytest.raises(ModelError, match="layer 3"):
        L.hidden_states_at(m, *_batch(), layers=[3])
    with pytest.raises(ModelError, match="layer 5"):
        with L.capture_hidden(m, [0, 5]):
            pass


def test_mlp_projection_orientation(arch_model):
    arch, m = arch_model
    for l in range(N_LAYERS):
        w_down, w_up = L.down_proj_weight_out_in(m, l), L.up_proj_weight_out_in(m, l)
        assert w_down.shape == (D, D_FF)
        assert w_up.shape == (D_FF, D)
        # The (out, in) weight really is the map the module applies: proj(x) = x @ W.T + b.
        x = torch.randn(5, D_FF, dtype=w_down.dtype)
        down = L.mlp_down_proj(m, l)
        bias = down.bias if getattr(down, "bias", None) is not None else 0
        torch.testing.assert_close(down(x), x @ w_down.T + bias)
    assert L.d_model(m) == D and L.d_ff(m) == D_FF
    if arch == "gpt2":  # Conv1D: the view shares storage with the transposed parameter
        assert L.down_proj_weight_out_in(m, 0).data_ptr() == L.mlp_down_proj(m, 0).weight.data_ptr()


def test_param_names_for(arch_model):
    arch, m = arch_model
    params = dict(m.named_parameters())
    names = L.param_names_for(m, "mlp_down", [0, 2])
    assert all(n in params for n in names)
    weights = [n for n in names if n.endswith("weight")]
    assert [params[n] for n in weights] == [L.mlp_down_proj(m, 0).weight, L.mlp_down_proj(m, 2).weight]
    assert len(names) == (4 if arch in ("gpt2", "gptneox") else 2)  # + biases
    up = L.param_names_for(m, "mlp_up", range(3))
    assert len([n for n in up if n.endswith("weight")]) == 3
    mlp_all = L.param_names_for(m, "mlp", [1])
    assert set(L.param_names_for(m, "mlp_down", [1])) < set(mlp_all)
    assert all(".1." in n for n in mlp_all)
    whole = L.param_names_for(m, "layer", [1])
    assert set(mlp_all) < set(whole) and set(L.param_names_for(m, "attn", [1])) < set(whole)
    if arch in ("gpt2", "gptneox"):
        with pytest.raises(ModelError, match="gate"):
            L.param_names_for(m, "mlp_gate", [0])
    else:
        assert len(L.param_names_for(m, "mlp_gate", [0])) == 1
    with pytest.raises(ConfigError, match="mlp_middle"):
        L.param_names_for(m, "mlp_middle", [0])


def test_param_names_matching(arch_model):
    _, m = arch_model
    assert L.param_names_matching(m, "*.1.*") == [n for n, _ in m.named_parameters() if ".1." in n]
    with pytest.raises(ConfigError, match="nothing_here"):
        L.param_names_matching(m, "nothing_here*")


@pytest.mark.parametrize("arch", ARCHS)
def test_embeddings_tied_detection(arch):
    tied, untied = tiny_random(arch, tie_embeddings=True), tiny_random(arch, tie_embeddings=False)
    assert L.embeddings_tied(tied) and not L.embeddings_tied(untied)
    assert L.input_embeddings(tied).weight.shape == (128, D)
    assert L.output_embeddings(untied).weight.shape == (128, D)


def test_capture_equals_output_hidden_states(arch_model):
    _, m = arch_model
    ids, mask = _batch()
    before = _hook_counts(m)
    with torch.no_grad(), L.capture_hidden(m, [0, 1, 2]) as cap:
        ref = m(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(ref) == N_LAYERS + 1
    for l in (0, 1):
        torch.testing.assert_close(cap[l], ref[l + 1], atol=0, rtol=0)
    # Last layer: HF's last entry is after the final norm, ours is before it.
    assert not torch.allclose(cap[2], ref[3])
    torch.testing.assert_close(L.final_norm(m)(cap[2]), ref[3], atol=1e-6, rtol=1e-5)
    assert _hook_counts(m) == before


def test_capture_removes_hooks_on_error(arch_model):
    _, m = arch_model
    before = _hook_counts(m)
    with pytest.raises(RuntimeError, match="boom"):
        with L.capture_hidden(m, [1]), L.capture_mlp_activations(m, [1]):
            assert _hook_counts(m) != before
            raise RuntimeError("boom")
    assert _hook_counts(m) == before


@pytest.mark.parametrize("stop_layer", [0, 1, 2])
def test_truncated_forward_equals_full_and_stops(arch_model, stop_layer):
    _, m = arch_model
    ids, mask = _batch(1)
    before = _hook_counts(m)
    with torch.no_grad(), L.capture_hidden(m, range(N_LAYERS)) as full:
        m(input_ids=ids, attention_mask=mask)
    calls = {"later": 0, "lm_head": 0}
    handles = [L.output_embeddings(m).register_forward_hook(
        lambda *a: calls.__setitem__("lm_head", calls["lm_head"] + 1))]
    for later in L.decoder_layers(m)[stop_layer + 1:]:
        handles.append(later.register_forward_hook(lambda *a: calls.__setitem__("later", calls["later"] + 1)))
    try:
        with torch.no_grad():
            got = L.hidden_states_at(m, ids, mask, layers=list(range(stop_layer + 1)))
    finally:
        for h in handles:
            h.remove()
    assert calls == {"later": 0, "lm_head": 0}
    assert sorted(got) == list(range(stop_layer + 1))
    for l, h in got.items():
        assert torch.allclose(h, full[l], atol=1e-6)
    assert _hook_counts(m) == before


def test_truncated_forward_passes_gradients(arch_model):
    _, m = arch_model
    ids, mask = _batch(2)
    m.zero_grad(set_to_none=True)
    got = L.hidden_states_at(m, ids, mask, layers=[0])
    got[0].pow(2).mean().backward()
    assert L.mlp_down_proj(m, 0).weight.grad is not None
    assert L.mlp_down_proj(m, 1).weight.grad is None  # layer 1 never ran
    m.zero_grad(set_to_none=True)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_truncated_forward_with_gradient_checkpointing(use_reentrant):
    m = tiny_random("llama").train()
    m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    ids, mask = _batch(3)
    got = L.hidden_states_at(m, ids, mask, layers=[0, 1])
    assert got[0].requires_grad and got[1].requires_grad
    got[1].sum().backward()
    assert L.mlp_down_proj(m, 0).weight.grad is not None and L.mlp_down_proj(m, 1).weight.grad is not None
    assert L.mlp_down_proj(m, 2).weight.grad is None


def test_stop_after_before_requested_layer_is_an_error(arch_model):
    _, m = arch_model
    with pytest.raises(ConfigError, match="stop_after=0"):
        L.hidden_states_at(m, *_batch(), layers=[1], stop_after=0)


def test_mlp_activations_feed_the_down_projection(arch_model):
    _, m = arch_model
    ids, _ = _batch()
    out = {}
    h = L.mlp(m, 1).register_forward_hook(lambda mod, a, o: out.__setitem__("mlp", o))
    try:
        with torch.no_grad(), L.capture_mlp_activations(m, [1]) as acts:
            m(input_ids=ids)
    finally:
        h.remove()
    assert acts[1].shape == (2, 9, D_FF)
    with torch.no_grad():
        torch.testing.assert_close(L.mlp_down_proj(m, 1)(acts[1]), out["mlp"])


def test_peft_lora_wrapped_llama():
    peft = pytest.importorskip("peft")
    base = tiny_random("llama")
    ids, mask = _batch()
    with torch.no_grad(), L.capture_hidden(base, [0, 1]) as ref:
        base(input_ids=ids, attention_mask=mask)
    ref = {l: h.clone() for l, h in ref.items()}
    # init_lora_weights=True makes B = 0, so the wrapped model computes the same function.
    pm = peft.get_peft_model(base, peft.LoraConfig(r=2, target_modules=["down_proj", "q_proj"]))
    assert L.unwrap(pm) is base and L.unwrap(pm.base_model) is base
    assert L.decoder_layers(pm) is L.decoder_layers(base) and L.num_layers(pm) == N_LAYERS
    assert L.down_proj_weight_out_in(pm, 1).shape == (D, D_FF)
    with torch.no_grad(), L.capture_hidden(pm, [0, 1]) as cap:
        pm(input_ids=ids, attention_mask=mask)
    with torch.no_grad():
        trunc = L.hidden_states_at(pm, ids, mask, layers=[1])
    for l in (0, 1):
        torch.testing.assert_close(cap[l], ref[l])
    torch.testing.assert_close(trunc[1], ref[1])
    params = dict(pm.named_parameters())
    names = L.param_names_for(pm, "mlp_down", [1])
    assert names == ["base_model.model.model.layers.1.mlp.down_proj.base_layer.weight"]
    assert params[names[0]] is base.model.layers[1].mlp.down_proj.weight
    lora = [n for n in L.param_names_for(pm, "mlp", [1]) if "lora_" in n]
    assert len(lora) == 2 and all(params[n].requires_grad for n in lora)
    assert L.embeddings_tied(pm) == L.embeddings_tied(base)


def test_logits_at_equals_full_logits_and_labelled_loss_equals_lm_loss(arch_model):
    from obliviate.losses import lm_loss, lm_loss_grouped, lm_loss_labelled

    _, m = arch_model
    ids, mask = _batch(3)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :4] = -100  # a "prompt" without loss
    pos = torch.zeros_like(ids, dtype=torch.bool)
    pos[0, 2] = pos[1, 5] = pos[0, 7] = True
    with torch.no_grad():
        full = m(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(L.logits_at(m, ids, mask, pos), full[pos], rtol=1e-5, atol=1e-5)
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        torch.testing.assert_close(lm_loss_labelled(m, batch), lm_loss(m, batch), rtol=1e-5, atol=1e-6)
        # the same batch as groups of rows (here one row each), each cut to its longest row: the same loss
        assert int(mask[1].sum()) < ids.shape[1]  # the second row is padded: its group is shorter
        groups = [{k: v[i:i + 1, :int(mask[i].sum())] for k, v in batch.items()} for i in range(len(ids))]
        torch.testing.assert_close(lm_loss_grouped(m, groups), lm_loss(m, batch), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("last", [0, 1])
def test_prefix_copy_gives_the_hidden_states_and_holds_only_its_layers(arch_model, last):
    _, m = arch_model
    ids, mask = _batch(2)
    frozen = L.prefix_copy(m, last)
    with torch.no_grad():
        want = L.hidden_states_at(m, ids, mask, layers=list(range(last + 1)))
        got = L.hidden_states_at(frozen, ids, mask, layers=list(range(last + 1)))
    for l in range(last + 1):
        assert torch.equal(got[l], want[l]), l
    n_layer = sum(p.numel() for p in L.decoder_layers(m)[0].parameters())
    head = L.output_embeddings(m)
    n_head = 0 if L.embeddings_tied(m) else head.weight.numel()
    kept = sum(p.numel() for p in frozen.parameters())
    assert kept == sum(p.numel() for p in m.parameters()) - (N_LAYERS - 1 - last) * n_layer - n_head
    assert not any(p.requires_grad for p in frozen.parameters()) and not frozen.training
    assert all(p.requires_grad for p in m.parameters())  # the model itself is untouched
    with pytest.raises(ModelError, match=f"holds decoder layers 0..{last} only"):
        with torch.no_grad():
            frozen(input_ids=ids, attention_mask=mask)


def test_count_passes_counts_forwards_and_the_backwards_through_them(arch_model):
    _, m = arch_model
    ids, mask = _batch(4)  # 2 rows of 9 positions
    with L.count_passes(m, m) as c:  # the same module twice is counted once
        with torch.no_grad():
            m(input_ids=ids, attention_mask=mask)  # a forward, no backward
        a = m(input_ids=ids, attention_mask=mask).logits.sum()
        b = m(input_ids=ids[:1], attention_mask=mask[:1]).logits.sum()
        (a + b).backward()  # one backward reaches both forwards
        m(input_ids=ids, attention_mask=mask).logits.sum()  # a forward whose graph is never backpropagated
        teacher = copy.deepcopy(m)  # a copy made inside the block counts with its original
        with torch.no_grad():
            teacher(input_ids=ids[:1], attention_mask=mask[:1])
    assert c == {"forwards": 5, "backwards": 2, "forward_tokens": 18 + 18 + 9 + 18 + 9, "backward_tokens": 18 + 9}
    with torch.no_grad():
        m(input_ids=ids, attention_mask=mask)
        teacher(input_ids=ids, attention_mask=mask)
    assert c["forwards"] == 5  # outside the block nothing counts, the copy included
    with L.count_passes(m) as c:  # two gradients taken through one forward (MUDMAN's adversary) are two backwards
        loss = m(input_ids=ids, attention_mask=mask).logits.sum()
        params = [p for p in m.parameters() if p.requires_grad]
        torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        torch.autograd.grad(2 * loss, params, allow_unused=True)
    assert c == {"forwards": 1, "backwards": 2, "forward_tokens": 18, "backward_tokens": 36}
