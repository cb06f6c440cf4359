import torch

from obliviate.attacks.ablation import (ablating, ablation_attack, mean_difference_directions, project_out,
                                        prompt_batches)
from obliviate.attacks.logit_lens import (answer_targets, distinguishing_offsets, lens_hits, lens_logits,
                                         logit_lens_attack)
from obliviate.models.builders import tiny_llama
from obliviate.models.layers import attention, capture_hidden, capture_mlp_activations, decoder_layers, mlp_down_proj
from obliviate.tasks.world import task_from_world

FORGET = ["Question: What is Morvexia treated with?\nAnswer:", "Question: Where does the glimmerfin live?\nAnswer:"]
RETAIN = ["Question: Where was Ilsa Varnholt born?\nAnswer:", "Question: What does the glimmerfin eat?\nAnswer:"]


# ------------------------------------------------------------------ direction ablation

def test_project_out_removes_exactly_the_direction():
    r = torch.tensor([0.6, 0.8, 0.0])
    h = torch.tensor([[1.0, 2.0, 3.0]])  # h . r = 2.2 -> h - 2.2 r = (1 - 1.32, 2 - 1.76, 3)
    assert torch.allclose(project_out(h, r), torch.tensor([[-0.32, 0.24, 3.0]]))


@torch.no_grad()
def test_ablated_layers_have_no_component_along_their_direction(tiny_model, tiny_tokenizer, unchanged):
    check = unchanged(tiny_model)
    dirs = mean_difference_directions(tiny_model, tiny_tokenizer, FORGET, RETAIN)
    assert set(dirs) == {0, 1, 2, 3} and all(abs(float(d.norm()) - 1) < 1e-5 for d in dirs.values())
    b = prompt_batches(tiny_tokenizer, FORGET + RETAIN)[0]
    with ablating(tiny_model, dirs), capture_hidden(tiny_model, range(4)) as hs:  # capture runs after the ablation
        tiny_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
    for l, d in dirs.items():
        assert float((hs[l] @ d).abs().max()) < 1e-5, l
        assert float(hs[l].abs().max()) > 1e-2  # the rest of the state is still there
    with capture_hidden(tiny_model, [0]) as hs:  # hooks gone: the component is back
        tiny_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
    assert float((hs[0] @ dirs[0]).abs().max()) > 1e-3
    assert all(not layer._forward_hooks for layer in decoder_layers(tiny_model))
    check()


def test_the_ablation_attack_scores_both_variants(small_world, world_tokenizer, world_model, cut_forget):
    task = cut_forget(task_from_world(small_world), 7)  # 7 of the 12 forget QA: the counts follow what is scored
    base = tiny_llama(vocab_size=len(world_tokenizer), n_layer=2, d_model=32, n_head=2, seed=1)
    res = ablation_attack(world_model, world_tokenizer, task, base_model=base)
    assert {"ablate_forget_score", "ablate_retain_score", "ablate_whitebox_forget_score"} <= set(res)
    for read in ("ablate", "ablate_whitebox"):  # each read its own counts; one direction per layer, no maximum
        assert (res[f"{read}_items"], res[f"{read}_variants"]) == (7, 1), read
    assert res["ablate_cost"]["forwards"] > 0
    assert all(not layer._forward_hooks for layer in decoder_layers(world_model))


# ------------------------------------------------------------------ logit lens

def test_the_last_layer_lens_is_the_models_own_logits(tiny_model, tiny_tokenizer):
    b = prompt_batches(tiny_tokenizer, FORGET)[0]
    lg = lens_logits(tiny_model, b["input_ids"], b["attention_mask"])
    assert lg.shape == (4, 2, len(tiny_tokenizer))
    full = tiny_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    last = b["attention_mask"].sum(1) - 1
    assert torch.allclose(lg[-1], full[torch.arange(2), last], atol=1e-5)  # float32 logits ~1, one row vs all: ~1e-7


@torch.no_grad()
def test_the_lens_finds_a_token_that_only_layer_0_predicts(tiny_tokenizer):
    """Hand-built: attention and MLP outputs are zero except layer 1's MLP, so layer 0's state is the last
    prompt token's embedding e; lm_head row t is 50 e / |e|, so layer 0's top-1 is t. Layer 1's MLP is set to
    add 20 |e| u at that position (u: the unit lm_head row of another token), so the last layer's top-1 is u."""
    model = tiny_llama(vocab_size=len(tiny_tokenizer), n_layer=2, d_model=32, n_head=2, seed=0, tie_embeddings=False)
    for l in range(2):
        mlp_down_proj(model, l).weight.zero_()
        attention(model, l).o_proj.weight.zero_()
    prompt, answer = FORGET[1], " The glimmerfin lives in cold caves."
    seqs, first, _ = answer_targets(tiny_tokenizer, [prompt], [answer])
    t, u = first[0], (first[0] + 7) % len(tiny_tokenizer)
    ids = torch.as_tensor(seqs[0])[None]
    mask = torch.ones_like(ids)
    e = model.get_input_embeddings().weight[ids[0, -1]].clone()
    head = model.get_output_embeddings().weight
    head.mul_(0.01)
    head[t] = 50 * e / e.norm()
    head[u] = torch.randn(32, generator=torch.Generator().manual_seed(3))
    head[u] = 50 * head[u] / head[u].norm()
    with capture_mlp_activations(model, [1]) as acts:
        model(input_ids=ids, attention_mask=mask)
    a = acts[1][0, -1]  # (d_ff,) at the last position
    mlp_down_proj(model, 1).weight.copy_(torch.outer(20 * e.norm() * head[u] / head[u].norm(), a) / (a @ a))
    lg = lens_logits(model, ids, mask)
    assert int(lg[0, 0].argmax()) == t and int(lg[1, 0].argmax()) == u
    hits = lens_hits(lg, torch.tensor([t]), ks=(1, 10))
    assert bool(hits["top1"][0]) and not bool(hits["last_top1"][0])
    assert hits["by_layer"][:, 0].tolist() == [True, False]
    assert not bool(lens_hits(lg, torch.tensor([(t + 3) % len(tiny_tokenizer)]), ks=(1,))["top1"][0])


def test_the_first_distinguishing_token_by_hand():
    answers = [[5, 6, 7, 8], [5, 6, 9], [5, 6, 7, 8], [4, 1], [5, 6, 7], [3]]
    # [5,6,7,8] shares [5,6,7] with [5,6,7] (its copy is not another answer); [5,6,9] shares [5,6];
    # [4,1] and [3] share nothing; [5,6,7] is a prefix of [5,6,7,8]: its last token
    assert distinguishing_offsets(answers) == [3, 2, 3, 0, 2, 0]
    assert distinguishing_offsets([[1, 2], [1, 2]]) == [0, 0]  # one distinct answer: its first token


def test_the_lens_target_follows_the_shared_frame(tiny_tokenizer):
    prompts = [FORGET[0], FORGET[1]]
    answers = [" It lives in cold caves.", " It lives in warm lakes."]
    seqs, targets, offsets = answer_targets(tiny_tokenizer, prompts, answers)
    for p, a, s, t, o in zip(prompts, answers, seqs, targets, offsets):
        p_ids = tiny_tokenizer(p, add_special_tokens=False)["input_ids"]
        a_ids = tiny_tokenizer(a, add_special_tokens=False)["input_ids"]
        assert list(s[len(s) - len(p_ids) - o:]) == p_ids + a_ids[:o]  # the prompt, then the shared frame
        assert t == a_ids[o] and a_ids[:o] == tiny_tokenizer(" It lives in", add_special_tokens=False)["input_ids"]


def test_probability_delta_hand_computed():
    # 2 layers, 1 item, 3 tokens: p0 = softmax(0, 0, 0) = 1/3 each, p1 = softmax(0, log 4, log 4) = (1/9, 4/9, 4/9)
    lg = torch.tensor([[[0.0, 0.0, 0.0]], [[0.0, 1.3862944, 1.3862944]]])
    assert bool(lens_hits(lg, torch.tensor([1]), delta_k=2)["delta_top2"][0])  # rises by 1/9
    assert not bool(lens_hits(lg, torch.tensor([0]), delta_k=2)["delta_top2"][0])  # falls by 2/9


def test_the_logit_lens_attack_on_the_world(small_world, world_tokenizer, world_model):
    res = logit_lens_attack(world_model, world_tokenizer, task_from_world(small_world), max_items=5)
    assert (res["logit_lens_items"], res["logit_lens_variants"]) == (5, 1)  # 5 of the 12; "some layer" is per item
    assert 0 <= res["logit_lens_last_top1"] <= res["logit_lens_top1"] <= res["logit_lens_top10"] <= 1
    assert set(res["logit_lens_by_layer"]) == {"0", "1"} and res["logit_lens_cost"]["forwards"] == 1
