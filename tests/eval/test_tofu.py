"""TOFU metrics: hand-computed pure functions, and a smoke test on a tiny random Llama."""

import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from obliviate.tasks.sources import QAExample
from obliviate.errors import ConfigError, DataError
from obliviate.eval.memorization import memorization_metrics
from obliviate.eval.mia import mia_metrics
from obliviate.eval.tofu import (
    TOFU_MIA_K, UTILITY_KEYS, answer_nll, answer_prob, forget_quality, forget_truth_ratio_score,
    model_truth_ratio, model_utility, normalised_choice_prob, report_notes, retain_utility, tofu_eval, tofu_metrics,
    truth_ratio, truth_ratio_score,
)
from obliviate.models.builders import tiny_random
from obliviate.models.tokenizer import train_tokenizer
from obliviate.tasks import Data, Task, load_task
from obliviate.tasks.tofu import tofu_prompt

# ------------------------------------------------------------------ pure functions


def test_truth_ratio_hand():
    # L_para = 1, perturbed losses 2 and 4 (mean 3): R = exp(1 - 3) = exp(-2)
    assert truth_ratio([1.0], [[2.0, 4.0]])[0] == pytest.approx(math.exp(-2))
    # ragged rows: exp(0.5 - 1.5) = exp(-1); exp(2 - mean(1, 2, 3)) = exp(0) = 1
    np.testing.assert_allclose(truth_ratio([0.5, 2.0], [[1.5], [1.0, 2.0, 3.0]]), [math.exp(-1), 1.0])
    # averaging losses first = geometric mean of perturbed probabilities over the paraphrased one
    p_pert, p_para = np.array([0.1, 0.4]), 0.5
    expected = math.sqrt(0.1 * 0.4) / 0.5
    assert truth_ratio([-math.log(p_para)], [-np.log(p_pert)])[0] == pytest.approx(expected)
    with pytest.raises(ValueError):
        truth_ratio([1.0, 2.0], [[1.0]])


def test_truth_ratio_scores_hand():
    # retain side: max(0, 1 - R) = 0.75, 0, 0.5 -> 1.25 / 3
    assert truth_ratio_score([0.25, 1.5, 0.5]) == pytest.approx(1.25 / 3)
    # forget side: min(R, 1/R) = 0.5, 0.5, 1 -> 2 / 3
    assert forget_truth_ratio_score([0.5, 2.0, 1.0]) == pytest.approx(2 / 3)


def test_forget_quality():
    a, b = [0.1, 0.5, 0.9, 1.3, 2.0], [0.2, 0.4, 0.45, 3.0]
    assert forget_quality(a, b) == pytest.approx(ks_2samp(a, b).pvalue)
    assert forget_quality(a, a) == pytest.approx(1.0)
    # fully separated samples of 3 and 3: exact two-sided p = 2 / C(6, 3) = 0.1
    assert forget_quality([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)


def test_normalised_choice_prob_hand():
    assert normalised_choice_prob(0.5, [0.25, 0.25]) == pytest.approx(0.5)
    np.testing.assert_allclose(normalised_choice_prob([0.2, 0.6], [[0.2, 0.4], [0.2]]), [0.25, 0.75])


def test_model_utility_hand():
    values = dict(zip(UTILITY_KEYS, [1.0, 0.5, 0.25] + [1.0] * 6))
    # 9 / (1 + 2 + 4 + 6 * 1) = 9 / 13
    assert model_utility(values) == pytest.approx(9 / 13)
    assert model_utility({k: 0.5 for k in UTILITY_KEYS}) == pytest.approx(0.5)
    assert model_utility({**values, "world_facts_rouge_l": 0.0}) == 0.0
    assert model_utility({**values, "forget_prob": 0.01}) == pytest.approx(9 / 13)  # extra keys ignored
    with pytest.raises(ConfigError, match="retain_prob"):
        model_utility({k: v for k, v in values.items() if k != "retain_prob"})
    assert model_utility({**values, "retain_prob": -0.1}) == 0.0  # a term below zero sinks it, as a zero does
    with pytest.raises(ValueError, match="finite numbers"):
        model_utility({**values, "retain_prob": float("nan")})


def test_retain_utility_is_the_retain_terms_only():
    values = dict(zip(UTILITY_KEYS, [1.0, 0.5, 0.25] + [0.0] * 6))  # a tiny model: no real-world knowledge
    assert model_utility(values) == 0.0
    assert retain_utility(values) == pytest.approx(3 / (1 + 2 + 4))


# ------------------------------------------------------------------ tiny model

FORGET = [
    QAExample("Where was Ana Bell born?", "Ana Bell was born in Lisbon.", "forget",
              paraphrased_answer="Lisbon is where Ana Bell was born.",
              perturbed_answers=["Ana Bell was born in Oslo.", "Ana Bell was born in Cairo.",
                                 "Ana Bell was born in Lima."]),
    QAExample("What genre does Ana Bell write?", "She writes mystery novels.", "forget",
              paraphrased_answer="Her books are mysteries.",
              perturbed_answers=["She writes cookbooks.", "She writes poetry."]),
    QAExample("Who was Ana Bell's father?", "Her father was a baker.", "forget",
              paraphrased_answer="A baker was her father.",
              perturbed_answers=["Her father was a pilot.", "Her father was a judge.", "Her father was a nurse."]),
]
RETAIN = [
    QAExample("Where was Tom Reed born?", "Tom Reed was born in Dublin.", "retain",
              paraphrased_answer="Dublin is his birthplace.",
              perturbed_answers=["Tom Reed was born in Rome.", "Tom Reed was born in Paris."]),
    QAExample("What does Tom Reed write?", "He writes science fiction.", "retain",
              paraphrased_answer="His books are science fiction.",
              perturbed_answers=["He writes romance.", "He writes history."]),
    QAExample("Did Tom Reed win a prize?", "He won the Hugo award.", "retain",
              paraphrased_answer="The Hugo award went to him.",
              perturbed_answers=["He won the Booker prize.", "He won no prize."]),
]
REAL_AUTHORS = [  # options style (real_authors.json) and perturbed style (real_authors_perturbed.json)
    QAExample("Who wrote 'Hamlet'?", "William Shakespeare", "real_authors",
              options=["Jane Austen", "William Shakespeare", "Mark Twain", "Leo Tolstoy"]),
    QAExample("Who wrote '1984'?", "George Orwell", "real_authors",
              perturbed_answers=["Aldous Huxley", "Ray Bradbury"]),
]
WORLD_FACTS = [
    {"question": "Where is the Eiffel Tower?", "answer": "Paris", "perturbed_answers": ["Berlin", "London", "Madrid"]},
    {"question": "What is the capital of Japan?", "answer": "Tokyo", "perturbed_answers": ["Seoul", "Beijing"]},
]


@pytest.fixture(scope="module")
def tiny():
    from obliviate.models.builders import tiny_llama
    from obliviate.models.tokenizer import train_tokenizer

    texts = []
    for ex in FORGET + RETAIN + REAL_AUTHORS:
        texts += [tofu_prompt(ex.question), ex.answer, ex.paraphrased_answer or "", *(ex.perturbed_answers or [])]
    for ex in WORLD_FACTS:
        texts += [tofu_prompt(ex["question"]), ex["answer"], *ex["perturbed_answers"]]
    tok = train_tokenizer(texts * 3, vocab_size=400)
    model = tiny_llama(vocab_size=len(tok), n_layer=2, d_model=32, n_head=2, d_ff=64, max_len=128, seed=0)
    return model.double(), tok  # float64: batched (padded) scores are checked against unbatched forwards


def _manual_nll(model, tok, question, answer):
    """Unbatched reference: mean -log p over ' answer' tokens and eos after [bos] + prompt."""
    p = [tok.bos_token_id] + tok(tofu_prompt(question), add_special_tokens=False)["input_ids"]
    a = tok(" " + answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([p + a])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), -1)
    targets = range(len(p), len(p) + len(a))
    return float(-sum(logp[t - 1, ids[0, t]] for t in targets) / len(a))


def test_answer_nll_matches_unbatched(tiny):
    model, tok = tiny
    qs = [FORGET[0].question, RETAIN[1].question, "Q?"]
    ans = [FORGET[0].answer, "He writes.", RETAIN[2].paraphrased_answer]  # different lengths -> padding
    model.train()
    got = answer_nll(model, tok, qs, ans, batch_size=2)
    assert model.training  # mode restored
    model.eval()
    expected = [_manual_nll(model, tok, q, a) for q, a in zip(qs, ans)]
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    np.testing.assert_allclose(answer_prob(model, tok, qs, ans), np.exp(-np.array(expected)), rtol=1e-4)


def test_model_truth_ratio_matches_definition(tiny):
    model, tok = tiny
    ex = FORGET[1]
    r = model_truth_ratio(model, tok, [ex.question], [ex.paraphrased_answer], [ex.perturbed_answers])
    para = _manual_nll(model, tok, ex.question, ex.paraphrased_answer)
    pert = [_manual_nll(model, tok, ex.question, w) for w in ex.perturbed_answers]
    assert r[0] == pytest.approx(math.exp(para - np.mean(pert)), rel=1e-4)


def test_answer_nll_too_long(tiny):
    model, tok = tiny
    with pytest.raises(DataError, match="longer than max_len=8"):
        answer_nll(model, tok, [FORGET[0].question], [FORGET[0].answer], max_len=8)


def test_tofu_eval_smoke(tiny):
    model, tok = tiny
    model.train()
    res = tofu_eval(model, tok, FORGET, RETAIN, REAL_AUTHORS, WORLD_FACTS, max_new_tokens=8)
    assert model.training  # mode restored
    for k in ("forget_prob", "forget_rouge_l", "forget_truth_ratio", "model_utility", *UTILITY_KEYS):
        assert 0.0 <= res[k] <= 1.0 and math.isfinite(res[k]), (k, res[k])
    assert "forget_quality" not in res
    ratios = res["per_example"]["forget_truth_ratio"]
    assert len(ratios) == 3 and all(r > 0 and math.isfinite(r) for r in ratios)
    assert len(res["per_example"]["forget_predictions"]) == 3
    # components are consistent with the pure functions
    assert res["forget_truth_ratio"] == pytest.approx(forget_truth_ratio_score(ratios))
    hm = 9 / sum(1 / res[k] for k in UTILITY_KEYS) if all(res[k] > 0 for k in UTILITY_KEYS) else 0.0
    assert res["model_utility"] == pytest.approx(hm)
    probs = answer_prob(model, tok, [e.question for e in FORGET], [e.answer for e in FORGET])
    assert res["forget_prob"] == pytest.approx(float(np.mean(probs)), rel=1e-5)
    # real authors: P(correct) / (P(correct) + sum P(wrong)), wrong = options minus the answer
    ra = REAL_AUTHORS[0]
    pc = answer_prob(model, tok, [ra.question], [ra.answer])[0]
    pw = answer_prob(model, tok, [ra.question] * 3, [o for o in ra.options if o != ra.answer])
    ra2 = REAL_AUTHORS[1]
    pc2 = answer_prob(model, tok, [ra2.question], [ra2.answer])[0]
    pw2 = answer_prob(model, tok, [ra2.question] * 2, ra2.perturbed_answers)
    expected = (pc / (pc + pw.sum()) + pc2 / (pc2 + pw2.sum())) / 2
    assert res["real_authors_prob"] == pytest.approx(expected, rel=1e-5)

    # the same model as its own reference: identical truth ratios -> forget quality 1
    again = tofu_eval(model, tok, FORGET, RETAIN, REAL_AUTHORS, WORLD_FACTS, retain_model_truth_ratios=ratios,
                      max_new_tokens=4)
    assert again["forget_quality"] == pytest.approx(1.0)


def test_tofu_eval_needs_perturbed_data(tiny):
    model, tok = tiny
    plain = [QAExample(e.question, e.answer, "forget10") for e in FORGET]
    with pytest.raises(DataError, match="forget example 1 has no paraphrased_answer"):
        tofu_eval(model, tok, plain, RETAIN, REAL_AUTHORS, WORLD_FACTS)
    with pytest.raises(DataError, match="world_facts example 1 has no perturbed_answers"):
        tofu_eval(model, tok, FORGET, RETAIN, REAL_AUTHORS, [{"question": "q", "answer": "a"}])


def test_tofu_metrics_of_a_task(tiny):
    """The metric set asked of a task: tofu_eval on its perturbed sets, and ``<split>_rouge_l``."""
    model, tok = tiny
    perturbed = {"forget": FORGET, "retain": RETAIN, "real_authors": REAL_AUTHORS, "world_facts": WORLD_FACTS}
    task = Task("tofu:forget05", forget=Data(qa=[(e.question, e.answer) for e in FORGET]), retain=Data(),
                meta={"split": "forget05", "perturbed": perturbed})
    res = tofu_metrics(model, tok, task, max_new_tokens=4)
    direct = tofu_eval(model, tok, FORGET, RETAIN, REAL_AUTHORS, WORLD_FACTS, max_new_tokens=4)
    assert res["forget05_rouge_l"] == res["forget_rouge_l"]
    added = {"forget05_rouge_l", "extraction_strength", "exact_memorization"}  # no holdout: no MIA
    assert {k: v for k, v in res.items() if k not in added} == direct and added <= set(res)
    ratios = res["per_example"]["forget_truth_ratio"]
    assert tofu_metrics(model, tok, task, retain_truth_ratios=ratios, max_new_tokens=4)["forget_quality"] == 1.0
    with pytest.raises(ConfigError, match="tofu:<forget> task"):
        tofu_metrics(model, tok, Task("world", forget=task.forget, retain=Data()))


def test_generation_budget_is_tofus_200_tokens():
    # TOFU and OpenUnlearning generate up to 200 new tokens; 64 cut the longest answers' ROUGE-L (issue #28)
    import inspect

    from obliviate.eval.tofu import tofu_eval, tofu_metrics
    from obliviate.pipelines.tofu import TofuConfig

    assert inspect.signature(tofu_eval).parameters["max_new_tokens"].default == 200
    assert inspect.signature(tofu_metrics).parameters["max_new_tokens"].default == 200
    assert TofuConfig().max_new_tokens == 200


# ------------------------------------------------------------------ the report's OpenUnlearning rows, on files

def _rec(i, who):
    return {"question": f"What did {who} {i} write?", "answer": f"{who} {i} wrote a book about ships."}


def _perturbed(i, who):
    return {**_rec(i, who), "paraphrased_question": f"Which book is by {who} {i}?",
            "paraphrased_answer": f"A book about ships, by {who} {i}.",
            "perturbed_answer": [f"{who} {i} wrote a poem.", f"{who} {i} wrote nothing."]}


@pytest.fixture
def tofu_files(tmp_path):
    """A tiny TOFU directory in the hub's layout: forget01 (3), full (6), the perturbed sets and holdout01 (3, the
    forget split's format: one JSON record a line with question and answer)."""
    d = tmp_path / "tofu"
    d.mkdir()

    def write(name, rows):
        (d / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

    write("forget01", [_rec(i, "Ann") for i in range(3)])
    write("full", [_rec(i, "Ann") for i in range(3)] + [_rec(i, "Bob") for i in range(3)])
    write("forget01_perturbed", [_perturbed(i, "Ann") for i in range(3)])
    write("retain_perturbed", [_perturbed(i, "Bob") for i in range(3)])
    write("holdout01", [_rec(i, "Cyd") for i in range(3)])
    for s in ("real_authors", "world_facts"):
        rows = [{"question": f"{s} {i}?", "answer": "Paris", "option1": "Rome", "option2": "Paris",
                 "option3": "Oslo", "option4": "Bern"} for i in range(2)]
        write(s, rows)
        write(f"{s}_perturbed", [{"question": r["question"], "answer": "Paris",
                                  "perturbed_answer": ["Rome", "Oslo", "Bern"]} for r in rows])
    return tmp_path


def _model_and_tokenizer(task):
    texts = [f"{p} {a}" for p, a in task.prompt.pairs(task.forget.qa + task.retain.qa + task.holdout.qa)]
    tok = train_tokenizer(texts * 5, vocab_size=300)
    return tiny_random("llama", vocab_size=len(tok), seed=0), tok


def test_tofu_report_has_extraction_strength_memorization_and_six_mias(tofu_files):
    task = load_task("tofu:forget01", root=tofu_files)
    assert task.holdout.qa == [(r["question"], r["answer"]) for r in (_rec(i, "Cyd") for i in range(3))]
    assert task.meta["metrics"] == ("extraction_strength", "exact_memorization")
    model, tok = _model_and_tokenizer(task)
    ref = tiny_random("llama", vocab_size=len(tok), seed=1)
    res = tofu_metrics(model, tok, task, max_new_tokens=4, reference_model=ref)
    mias = {f"mia_auc_{s}" for s in ("loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm", "reference")}
    assert mias | {"extraction_strength", "exact_memorization"} <= set(res)
    # the forget split's QA pairs against holdout01, Min-K% at OpenUnlearning's k = 0.4
    pairs = task.prompt.pairs(task.forget.qa)
    assert {k: res[k] for k in mias} == mia_metrics(model, tok, pairs, task.prompt.pairs(task.holdout.qa),
                                                     k=TOFU_MIA_K, gradnorm=True, reference_model=ref)
    mem = memorization_metrics(model, tok, pairs)
    assert res["extraction_strength"] == mem["extraction_strength"]
    assert res["exact_memorization"] == mem["exact_memorization"]
    assert report_notes(task) == []
    # without a reference model: five MIAs, and a line saying the sixth is missing
    five = tofu_metrics(model, tok, task, max_new_tokens=4)
    assert "mia_auc_reference" not in five and mias - {"mia_auc_reference"} <= set(five)
    assert report_notes(task, reference=False) == ["no reference model given; mia_auc_reference not reported"]


def test_tofu_report_without_holdout_names_the_file(tofu_files):
    (tofu_files / "tofu" / "holdout01.json").unlink()
    task = load_task("tofu:forget01", root=tofu_files)
    assert task.holdout is None and task.meta["holdout_split"] is None
    texts = [f"{p} {a}" for p, a in task.prompt.pairs(task.forget.qa + task.retain.qa)]
    tok = train_tokenizer(texts * 5, vocab_size=300)
    model = tiny_random("llama", vocab_size=len(tok), seed=0)
    res = tofu_metrics(model, tok, task, max_new_tokens=4, reference_model=model)
    assert not [k for k in res if k.startswith("mia_")]  # absent, not faked
    assert {"extraction_strength", "exact_memorization"} <= set(res)
    [line] = report_notes(task)
    assert line == (f"no holdout split: looked for {tofu_files / 'tofu' / 'holdout01.json'}; mia_auc_loss, "
                    "mia_auc_zlib, mia_auc_min_k, mia_auc_min_k_plus_plus, mia_auc_gradnorm, mia_auc_reference "
                    "not reported")
