"""Token-score AUROC, world token labels and the heuristic baselines."""

from types import SimpleNamespace

import pytest
import torch

from obliviate.errors import DataError
from obliviate.eval.token_scores import (
    probability_scores,
    rarity_scorer,
    token_auroc,
    token_counts,
    token_score_aurocs,
    uniform_scores,
    world_token_labels,
)

FACT = {"question": "What is Morvexia treated with?", "answer": "Morvexia is treated with zalpradine.",
        "answer_spans": [[0, 8, "specific"], [8, 24, "structural"], [24, 35, "specific"], [35, 36, "structural"]]}
FACT2 = {"question": "What does the glimmerfin eat?", "answer": "It eats moss.",
         "answer_spans": [[0, 7, "structural"], [7, 12, "specific"], [12, 13, "structural"]]}


def test_auroc_perfect_reversed_ties_and_hand_case():
    labels = torch.tensor([0, 0, 1, 1])
    assert token_auroc(torch.tensor([0.1, 0.2, 0.8, 0.9]), labels) == 1.0
    assert token_auroc(torch.tensor([0.9, 0.8, 0.2, 0.1]), labels) == 0.0
    assert token_auroc(torch.ones(4), labels) == 0.5
    # 4 positive-negative pairs: (0.35 > 0.1), (0.35 < 0.4), (0.8 > both) -> 3/4
    assert token_auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # a tie counts one half: pos {0.5, 0.9} vs neg {0.5, 0.2} -> (0.5 + 1 + 1 + 1) / 4
    assert token_auroc([0.5, 0.5, 0.2, 0.9], [1, 0, 0, 1]) == pytest.approx(0.875)


def test_auroc_ignores_unlabelled_positions_and_needs_both_classes():
    scores = torch.tensor([[0.9, 0.1, 5.0], [0.2, 0.8, -3.0]])
    labels = torch.tensor([[-1, 0, -1], [0, 1, -1]])  # only 0.1, 0.2 (neg) and 0.8 (pos) count
    assert token_auroc(scores, labels) == 1.0
    with pytest.raises(DataError, match="both classes"):
        token_auroc([0.1, 0.2], [1, 1])
    with pytest.raises(DataError, match="scores"):
        token_auroc([0.1, 0.2, 0.3], [1, 0])


def _decoded(tok, batch, labels, code, row=0):
    targets = batch["input_ids"][row, 1:]
    return "".join(tok.decode([int(t)]) for t, l in zip(targets, labels[row]) if l == code)


def test_world_token_labels_mark_exactly_the_specific_spans(tiny_tokenizer):
    batch, labels = world_token_labels(tiny_tokenizer, [FACT, FACT2])
    assert labels.shape == (2, batch["input_ids"].size(1) - 1)
    assert _decoded(tiny_tokenizer, batch, labels, 1) == " Morvexia zalpradine"
    assert _decoded(tiny_tokenizer, batch, labels, 0) == " is treated with."
    assert _decoded(tiny_tokenizer, batch, labels, 1, row=1) == " moss"
    assert _decoded(tiny_tokenizer, batch, labels, 0, row=1) == " It eats."
    # the batch is a forget batch: loss labels on the answer tokens and eos, nothing else
    lab = batch["labels"][:, 1:]
    assert ((lab != -100) == ((labels >= 0) | (lab == tiny_tokenizer.eos_token_id))).all()
    assert batch["attention_mask"][1].sum() < batch["attention_mask"][0].sum()  # row 1 padded
    assert (labels[1][batch["attention_mask"][1, 1:] == 0] == -1).all()


def test_world_forget_facts_label_their_specific_text(tiny_tokenizer):
    from obliviate.world import WorldConfig, generate_world

    facts = generate_world(WorldConfig(seed=0)).facts_by_split("forget")[:12]
    batch, labels = world_token_labels(tiny_tokenizer, facts)
    for i, f in enumerate(facts):
        specific = "".join(f["answer"][s:e] for s, e, k in f["answer_spans"] if k == "specific")
        assert _decoded(tiny_tokenizer, batch, labels, 1, row=i).split() == specific.split()
        assert (labels[i] == 1).any() and (labels[i] == 0).any()


class _UniformLM(torch.nn.Module):
    """Logits all zero: every token has probability 1/V."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, **kw):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, self.vocab))


def test_baseline_scores_by_hand():
    batch = {"input_ids": torch.tensor([[1, 2, 3, 2]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    assert torch.equal(uniform_scores(None, batch), torch.ones(1, 3))
    assert torch.allclose(probability_scores(_UniformLM(4), batch), torch.full((1, 3), 0.75))  # 1 - 1/4
    counts = torch.tensor([0, 0, 3, 1])
    assert torch.allclose(rarity_scorer(counts)(None, batch), torch.tensor([[1 / 4, 1 / 2, 1 / 4]]))


def test_token_counts(tiny_tokenizer):
    texts = ["Morvexia is treated", "is treated"]
    counts = token_counts(tiny_tokenizer, texts)
    n = sum(len(tiny_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    assert counts.shape == (len(tiny_tokenizer),) and int(counts.sum()) == n
    for tid in tiny_tokenizer("is treated", add_special_tokens=False)["input_ids"]:
        assert counts[tid] >= 2


def test_report_on_a_tiny_model(tiny_model, tiny_tokenizer):
    """Per-fact batches (with truncated padding) give the AUROCs of one whole-batch computation."""
    from obliviate.methods import build_method

    method = build_method("atwu")
    corpus = [" It is treated with. It eats."] * 5
    out = token_score_aurocs(tiny_model, tiny_tokenizer, [FACT, FACT2], scorers={"atwu": method.token_scores},
                             corpus_texts=corpus, batch_size=1)
    assert out["uniform"] == 0.5
    assert out["atwu"] == 0.5  # untrained scorer: every score is rho
    batch, labels = world_token_labels(tiny_tokenizer, [FACT, FACT2])
    rarity = rarity_scorer(token_counts(tiny_tokenizer, corpus))(None, batch)
    assert out["rarity"] == pytest.approx(token_auroc(rarity, labels))
    assert 0.5 < out["rarity"] < 1.0  # the specific words are rare here, but share letters with the corpus
    tiny_model.eval()
    assert out["probability"] == pytest.approx(token_auroc(probability_scores(tiny_model, batch), labels))
    assert (out["n_specific"], out["n_structural"]) == (int((labels == 1).sum()), int((labels == 0).sum()))
