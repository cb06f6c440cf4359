import pytest

import obliviate.attacks.format_shift as format_shift_module
from obliviate.attacks.format_shift import FORMATS, cloze_parts, cloze_prompt, format_shift_attack, starts_with_value
from obliviate.data import qa_prompt
from obliviate.errors import DataError

FACT = {
    "id": "forget-000-treated_with",
    "question": "What is Zalosis treated with?",
    "question_paraphrase": "Which drug is used to treat Zalosis?",
    "answer": "It is treated with vruroxil.",
    "answer_paraphrase": "Doctors give vruroxil to patients with Zalosis.",
    "value": "vruroxil",
    "answer_spans": [[0, 18, "structural"], [18, 27, "specific"], [27, 28, "structural"]],
}


def test_cloze_prompt_stops_right_before_the_value():
    assert cloze_parts(FACT) == ("It is treated with", "vruroxil")
    assert cloze_prompt(FACT) == "Question: What is Zalosis treated with?\nAnswer: It is treated with"


def test_cloze_prompt_without_a_specific_span_is_an_error():
    with pytest.raises(DataError, match="specific"):
        cloze_prompt({**FACT, "answer_spans": [[0, 28, "structural"]]})


def test_starts_with_value_compares_whole_normalised_words():
    assert starts_with_value(" vruroxil.", "vruroxil")
    assert starts_with_value(" Dry coughing, mostly", "dry coughing")
    assert not starts_with_value(" vruroxils", "vruroxil")
    assert not starts_with_value(" dry", "dry coughing")
    assert not starts_with_value("", "vruroxil")


def test_all_five_formats_in_unit_interval(small_world, world_tokenizer, world_model, unchanged):
    facts, mcqs = small_world.facts_by_split("forget"), small_world.mcqs(split="forget")
    check = unchanged(world_model)
    res = format_shift_attack(world_model, world_tokenizer, facts, mcqs)
    check()
    assert set(res) == set(FORMATS)
    assert all(0.0 <= v <= 1.0 for v in res.values())


def test_scoring_of_the_generated_formats(small_world, world_tokenizer, world_model, monkeypatch):
    """With a scripted generator: which answers count as correct in each generated format."""
    facts, mcqs = small_world.facts_by_split("forget"), small_world.mcqs(split="forget")
    n = len(facts)
    scripted = {}
    for i, f in enumerate(facts):
        scripted[qa_prompt(f["question"])] = " " + f["answer"].upper() if i % 2 == 0 else " wrong."
        # paraphrased question: the paraphrased answer and the canonical answer both count
        scripted[qa_prompt(f["question_paraphrase"])] = (" " + f["answer_paraphrase"], " " + f["answer"], " no.")[i % 3]
        scripted[cloze_prompt(f)] = f" {f['value']}." if i < n // 4 else " something else"

    def fake_generate(model, tokenizer, prompts, max_new_tokens=24, batch_size=64, stop="\n"):
        return [scripted[p] for p in prompts]

    monkeypatch.setattr(format_shift_module, "greedy_generate", fake_generate)
    res = format_shift_attack(world_model, world_tokenizer, facts, mcqs)
    assert res["qa"] == pytest.approx(len(range(0, n, 2)) / n)
    assert res["qa_paraphrase"] == pytest.approx(sum(i % 3 != 2 for i in range(n)) / n)
    assert res["cloze"] == pytest.approx((n // 4) / n)
