import numpy as np
import pytest
import torch

from obliviate.attacks.relearn import RelearnConfig, curve_auc, relearn_attack, steps_to_reach
from obliviate.data import qa_prompt
from obliviate.errors import ConfigError, DataError
from obliviate.eval import qa_accuracy
from obliviate.eval.answers import answer_matches, forget_qa_eval
from obliviate.eval.tofu import answer_prob
from obliviate.tasks.world import world_relearn_sets


# ------------------------------------------------------------------ curve maths (hand-computed)

def test_auc_of_a_linear_ramp_is_one_half():
    # x = 0, .5, 1; y = 0, .5, 1 -> .5 * (0 + .5) / 2 + .5 * (.5 + 1) / 2 = .125 + .375
    assert curve_auc([[0, 0.0], [5, 0.5], [10, 1.0]]) == pytest.approx(0.5)


def test_auc_with_uneven_steps_normalises_by_the_budget():
    # x = 0, 5/7, 1; y = 0, 1, 1 -> (5/7) * .5 + (2/7) * 1 = 4.5 / 7
    assert curve_auc([[0, 0.0], [5, 1.0], [7, 1.0]]) == pytest.approx(4.5 / 7)
    # a constant curve's area is its value (mean accuracy over the budget)
    assert curve_auc([[0, 0.3], [10, 0.3], [30, 0.3]]) == pytest.approx(0.3)
    assert curve_auc([[0, 0.4]]) == pytest.approx(0.4)


def test_steps_to_reach_is_the_first_step_at_or_above_the_target():
    curve = [[0, 0.1], [5, 0.3], [10, 0.6], [15, 0.5], [20, 0.7]]
    assert steps_to_reach(curve, 0.5) == 10
    assert steps_to_reach(curve, 0.6) == 10  # reaching exactly counts
    assert steps_to_reach(curve, 0.65) == 20
    assert steps_to_reach(curve, 0.1) == 0
    assert steps_to_reach(curve, 0.8) is None
    assert steps_to_reach(curve, None) is None


# ------------------------------------------------------------------ the attack

def _fast(**kw):
    return RelearnConfig(**{"steps": 6, "eval_every": 2, "batch_size": 4, "lr": 1e-2, **kw})


def test_curve_starts_at_zero_has_one_point_per_eval_and_the_model_is_untouched(
        small_world, world_tokenizer, world_model, unchanged):
    texts, facts = world_relearn_sets(small_world, "paragraphs")
    eval_fn = forget_qa_eval(world_tokenizer, facts)
    before_acc = eval_fn(world_model)
    check = unchanged(world_model)
    res = relearn_attack(world_model, world_tokenizer, texts, eval_fn, _fast(steps=7, eval_every=3), base_acc=None)
    check()
    assert [s for s, _ in res["curve"]] == [0, 3, 6, 7]
    assert res["curve"][0][1] == before_acc
    assert res["initial_acc"] == before_acc and res["final_acc"] == res["curve"][-1][1]
    assert res["steps_to_base"] is None and res["tokens_to_base"] is None
    assert all(0.0 <= a <= 1.0 for _, a in res["curve"])
    assert [s for s, _ in res["loss"]] == list(range(1, 8))


def test_relearning_the_eval_facts_themselves_raises_their_probability(
        small_world, world_tokenizer, world_model, unchanged):
    facts = small_world.facts_by_split("forget")
    pairs = [(qa_prompt(f["question"]), " " + f["answer"]) for f in facts]

    def mean_answer_prob(m):
        return float(np.mean(answer_prob(m, world_tokenizer, [f["question"] for f in facts],
                                         [f["answer"] for f in facts])))

    check = unchanged(world_model)
    res = relearn_attack(world_model, world_tokenizer, pairs, mean_answer_prob, _fast(steps=10, eval_every=5))
    check()
    accs = [a for _, a in res["curve"]]
    assert accs[-1] > 2 * accs[0]
    losses = [l for _, l in res["loss"]]
    assert np.mean(losses[-3:]) < losses[0]


def test_steps_and_tokens_to_base(world_tokenizer, world_model):
    texts = ["Zalosis was first recorded in Mousora.", "A physician wrote about Zalosis in 1898."]
    n_tokens = sum(len(world_tokenizer(t, add_special_tokens=False)["input_ids"]) + 2 for t in texts)  # + bos, eos
    values = iter([0.0, 0.2, 0.6, 0.9])
    res = relearn_attack(world_model, world_tokenizer, texts, lambda m: next(values),
                         _fast(steps=6, eval_every=2, batch_size=8), base_acc=0.5)
    assert res["curve"] == [[0, 0.0], [2, 0.2], [4, 0.6], [6, 0.9]]
    assert res["steps_to_base"] == 4
    assert res["tokens_per_step"] == n_tokens  # both texts in every batch
    assert res["tokens_to_base"] == 4 * n_tokens
    # x = 0, 1/3, 2/3, 1: (1/3) * (0 + .2 + .2 + .6 + .6 + .9) / 2
    assert res["auc"] == pytest.approx((0.2 + 0.8 + 1.5) / 6)


def test_same_seed_same_result(world_tokenizer, world_model):
    texts = ["Zalosis was first recorded in Mousora.", "A physician wrote about Zalosis in 1898.",
             "Old archives in Mousora hold notes on Zalosis."]
    runs = [relearn_attack(world_model, world_tokenizer, texts, lambda m: 0.0, _fast(batch_size=2, seed=3),
                           keep_model=True) for _ in range(2)]
    assert runs[0]["loss"] == runs[1]["loss"]
    for (n, a), (_, b) in zip(runs[0]["model"].named_parameters(), runs[1]["model"].named_parameters()):
        assert torch.equal(a, b), n
    other = relearn_attack(world_model, world_tokenizer, texts, lambda m: 0.0, _fast(batch_size=2, seed=4))
    assert other["loss"] != runs[0]["loss"]  # another data order


def test_lora_relearning_merges_and_leaves_the_model_untouched(world_tokenizer, world_model, unchanged):
    texts = ["Zalosis was first recorded in Mousora.", "A physician wrote about Zalosis in 1898."]
    check = unchanged(world_model)
    res = relearn_attack(world_model, world_tokenizer, texts, lambda m: 0.0,
                         _fast(steps=3, lora=True, lora_r=2), keep_model=True)
    check()
    tuned = dict(res["model"].named_parameters())
    assert set(tuned) == {n for n, _ in world_model.named_parameters()}  # merged: plain architecture again
    changed = [n for n, p in world_model.named_parameters() if not torch.equal(p, tuned[n])]
    assert changed and all("proj" in n for n in changed)  # linear layers only, not embeddings or norms


def test_bad_inputs(world_tokenizer, world_model, small_world):
    with pytest.raises(DataError, match="empty"):
        relearn_attack(world_model, world_tokenizer, [], lambda m: 0.0, _fast())
    with pytest.raises(DataError, match="mix"):
        relearn_attack(world_model, world_tokenizer, ["a text", ("a prompt", " answer")], lambda m: 0.0, _fast())
    with pytest.raises(ConfigError, match="steps"):
        RelearnConfig(steps=-1)
    with pytest.raises(ConfigError, match="sideways"):
        world_relearn_sets(small_world, "sideways")


# ------------------------------------------------------------------ world sets

def test_paragraph_mode_trains_on_forget_entity_paragraphs_and_evaluates_all_forget_facts(small_world):
    texts, facts = world_relearn_sets(small_world, "paragraphs")
    forget = small_world.facts_by_split("forget")
    assert facts == forget
    entities = {f["entity"] for f in forget}
    assert texts and len(texts) == len([p for p in small_world.relearn_paragraphs if p["entity"] in entities])
    assert all(any(e in t for e in entities) for t in texts)


def test_fact_mode_splits_the_forget_facts_in_two_seeded_halves(small_world):
    forget = small_world.facts_by_split("forget")
    pairs, held = world_relearn_sets(small_world, "facts", seed=0)
    assert len(pairs) == len(forget) // 2 and len(held) == len(forget) - len(forget) // 2
    trained = {p for p, _ in pairs}
    assert all(qa_prompt(f["question"]) not in trained for f in held)
    assert trained | {qa_prompt(f["question"]) for f in held} == {qa_prompt(f["question"]) for f in forget}
    by_prompt = {qa_prompt(f["question"]): f for f in forget}
    assert all(a == " " + by_prompt[p]["answer"] for p, a in pairs)
    assert world_relearn_sets(small_world, "facts", seed=0) == (pairs, held)
    assert world_relearn_sets(small_world, "facts", seed=1)[1] != held


# ------------------------------------------------------------------ the QA evaluation

def test_answer_matching():
    ans = "It is treated with vruroxil."
    assert answer_matches(" it is treated with Vruroxil", ans, "exact")
    assert not answer_matches(" It is treated with vruroxil. The oldest account", ans, "exact")
    assert answer_matches(" It is treated with vruroxil. The oldest account", ans, "prefix")  # runs on
    assert not answer_matches(" It is treated with vruroxils.", ans, "prefix")
    assert not answer_matches(" It is treated with", ans, "prefix")
    with pytest.raises(ConfigError, match="fuzzy"):
        answer_matches("a", "a", "fuzzy")


def test_forget_qa_eval_scores_scripted_answers(small_world, world_tokenizer, world_model, monkeypatch):
    import obliviate.eval.core

    facts = small_world.facts_by_split("forget")[:4]
    scripted = {qa_prompt(f["question"]): p for f, p in zip(facts, [
        " " + facts[0]["answer"],  # exact
        " " + facts[1]["answer"] + " The oldest account dates from 1898.",  # runs on
        " " + facts[2]["answer"][:-8],  # cut short
        " I do not know.",
    ])}
    monkeypatch.setattr(obliviate.eval.core, "greedy_generate",
                        lambda model, tok, prompts, *a, **k: [scripted[p] for p in prompts])
    assert forget_qa_eval(world_tokenizer, facts, match="exact")(world_model) == 0.25
    assert forget_qa_eval(world_tokenizer, facts)(world_model) == 0.5
    ref = qa_accuracy(world_model, world_tokenizer, [f["question"] for f in facts], [f["answer"] for f in facts])
    assert ref["exact_match"] == 0.25
    with pytest.raises(ConfigError, match="fuzzy"):
        forget_qa_eval(world_tokenizer, facts, match="fuzzy")
