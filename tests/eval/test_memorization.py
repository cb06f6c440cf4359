"""Exact memorization and extraction strength (obliviate.eval.memorization) against hand computations and against
OpenUnlearning's definition, transcribed from its formulas (src/evals/metrics/memorization.py at 2db47ec)."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from obliviate.errors import DataError
from obliviate.eval.memorization import (exact_memorization_score, extraction_strength_score, greedy_matches,
                                         memorization_metrics)
from obliviate.eval.mia import token_logprob_stats
from obliviate.models.builders import tiny_random
from obliviate.models.tokenizer import train_tokenizer

CORPUS = ["Question: Who wrote it?\nAnswer: The old man wrote it.", "Question: Where is it?\nAnswer: In the park.",
          "Question: When did it happen?\nAnswer: In the winter of that year."]
PAIRS = [("Question: Who wrote it?\nAnswer:", " The old man wrote it."),
         ("Question: Where is it?\nAnswer:", " In the park."),
         ("Question: When did it happen?\nAnswer:", " In the winter of that year.")]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CORPUS * 5, vocab_size=300)


# ------------------------------------------------------------------ the scores, by hand

@pytest.mark.parametrize("matches, es, em", [
    ([1, 1, 1, 1], 1.0, 1.0),    # the question alone extracts the answer: k* = 0
    ([0, 1, 1, 1], 0.75, 0.75),  # from y_<1 on, every token is greedy: k* = 1, ES = 1 - 1/4
    ([1, 0, 1, 1], 0.5, 0.75),   # a wrong second token: the suffix from k = 2 is the first all right
    ([1, 1, 0, 0], 0.25, 0.5),   # the last token wrong: no suffix matches, k* stays n - 1 = 3 (OpenUnlearning's loop)
    ([0, 0, 0, 0], 0.25, 0.0),   # nothing predicted: ES is still 1/n, not 0, as OpenUnlearning computes it
    ([1], 1.0, 1.0),
])
def test_scores_by_hand(matches, es, em):
    assert extraction_strength_score(matches) == pytest.approx(es)
    assert exact_memorization_score(matches) == pytest.approx(em)


def test_no_answer_token():
    # OpenUnlearning: ES 0 (counted), EM None (left out of the mean)
    assert extraction_strength_score([]) == 0.0 and exact_memorization_score([]) is None


# ------------------------------------------------------------------ a model whose greedy predictions are set by hand

class ScriptedLM(torch.nn.Module):
    """Predicts, after each prefix, the token ``script`` gives it (a large logit), else token 0."""

    def __init__(self, vocab: int, script: dict):
        super().__init__()
        self.vocab, self.script = vocab, script
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(max_position_embeddings=128)

    def forward(self, input_ids, attention_mask=None):
        B, T = input_ids.shape
        logits = torch.zeros(B, T, self.vocab)
        for b in range(B):
            for t in range(T):
                logits[b, t, self.script.get(tuple(input_ids[b, :t + 1].tolist()), 0)] = 10.0
        return SimpleNamespace(logits=logits + 0 * self.dummy)


def scripted(tok, wrong: dict[int, set[int]]):
    """A ScriptedLM that continues every pair of PAIRS correctly except at answer token ``i`` of pair ``j`` for
    ``i`` in ``wrong[j]``; returns it and the answers' token counts."""
    script, sizes = {}, []
    for j, (p, a) in enumerate(PAIRS):
        ctx = [tok.bos_token_id] + tok(p, add_special_tokens=False)["input_ids"]
        ans = tok(a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        sizes.append(len(ans) - 1)
        seq = ctx + ans
        for i in range(len(ans)):
            nxt = seq[len(ctx) + i]
            script[tuple(seq[:len(ctx) + i])] = (nxt + 1) % len(tok) if i in wrong.get(j, set()) else nxt
    return ScriptedLM(len(tok), script), sizes


def test_scripted_model_by_hand(tok):
    # pair 0: all right; pair 1: its first answer token wrong; pair 2: its last answer token wrong, and the eos
    # (left out, as OpenUnlearning leaves out the last labelled token) wrong too
    _, sizes = scripted(tok, {})
    n0, n1, n2 = sizes
    model, _ = scripted(tok, {1: {0}, 2: {n2 - 1, n2}})
    res = memorization_metrics(model, tok, PAIRS, batch_size=2)
    es = [1.0, 1.0 - 1 / n1, 1 / n2]
    em = [1.0, (n1 - 1) / n1, (n2 - 1) / n2]
    assert res["per_example"]["extraction_strength"] == pytest.approx(es)
    assert res["per_example"]["exact_memorization"] == pytest.approx(em)
    assert res["extraction_strength"] == pytest.approx(np.mean(es))
    assert res["exact_memorization"] == pytest.approx(np.mean(em))
    # only the eos wrong: nothing changes (it is not compared)
    eos_only = memorization_metrics(scripted(tok, {0: {n0}})[0], tok, PAIRS[:1])
    assert eos_only["extraction_strength"] == 1.0 and eos_only["exact_memorization"] == 1.0


# ------------------------------------------------------------------ against OpenUnlearning's definition

def open_unlearning_es_em(model, tok, prompt, answer):
    """OpenUnlearning's formulas on one unpadded sequence: labels on the answer and eos, the last labelled token
    dropped, argmax of the log-softmax at the positions before each label; EM = mean(preds == labels); ES: the
    first k whose suffix preds[k:] == labels[k:] (the loop's k left at n - 1 when none), 1 - k / n."""
    ctx = [tok.bos_token_id] + tok(prompt, add_special_tokens=False)["input_ids"]
    ans = tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([ctx + ans])
    labels = torch.tensor([[-100] * len(ctx) + ans])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(input_ids=ids).logits, dim=-1)[0, :-1]
    idx = (labels[0] != -100).nonzero(as_tuple=True)[0][:-1]
    preds = log_probs[idx[0] - 1:idx[-1]].argmax(-1)
    lab = labels[0, idx]
    em = float((preds == lab).sum() / len(lab))
    k = 0
    for k in range(len(lab)):
        if torch.equal(preds[k:], lab[k:]):
            break
    return 1 - k / len(lab), em


@pytest.mark.parametrize("wrong", [{}, {0: {1, 3}, 1: {2}}, {0: {0, 1, 2}, 2: {4}}, {1: {0}, 2: {0, 5, 6}}])
def test_matches_open_unlearning(tok, wrong):
    model, _ = scripted(tok, wrong)
    res = memorization_metrics(model, tok, PAIRS, batch_size=3)  # padded together
    want = [open_unlearning_es_em(model, tok, p, a) for p, a in PAIRS]
    assert res["per_example"]["extraction_strength"] == pytest.approx([w[0] for w in want])
    assert res["per_example"]["exact_memorization"] == pytest.approx([w[1] for w in want])
    assert len({w for w, _ in want}) > 1 or not wrong  # the patterns give different scores


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_matches_open_unlearning_on_a_random_model(tok, arch):
    # a random model predicts nothing: EM 0 and ES 1/n on every pair (OpenUnlearning's floor)
    model = tiny_random(arch, vocab_size=len(tok), seed=3)
    res = memorization_metrics(model, tok, PAIRS, batch_size=3)
    want = [open_unlearning_es_em(model, tok, p, a) for p, a in PAIRS]
    assert res["per_example"]["extraction_strength"] == pytest.approx([w[0] for w in want])
    assert res["per_example"]["exact_memorization"] == pytest.approx([w[1] for w in want])


def test_greedy_field_is_the_argmax(tok):
    model = tiny_random("llama", vocab_size=len(tok), seed=1)
    s = token_logprob_stats(model, tok, [PAIRS[0][1]], [PAIRS[0][0]])[0]
    ctx = [tok.bos_token_id] + tok(PAIRS[0][0], add_special_tokens=False)["input_ids"]
    ids = ctx + s["token_ids"].tolist()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    assert s["greedy"].tolist() == logits[len(ctx) - 1:len(ids) - 1].argmax(-1).tolist()
    assert greedy_matches(s).tolist() == (s["greedy"] == s["token_ids"])[:-1].tolist()


def test_bad_inputs(tok):
    model = tiny_random("llama", vocab_size=len(tok), seed=0)
    with pytest.raises(DataError, match="memorization_metrics: no examples"):
        memorization_metrics(model, tok, [])
    with pytest.raises(DataError, match=r"examples\[0\] must be a text"):
        memorization_metrics(model, tok, [("a", 3)])
