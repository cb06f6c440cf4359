"""The world's format variants (tasks/world.py) and the format-shift attack over a task's variant sets."""

import pytest

from obliviate.attacks.format_shift import format_shift_attack, variant_sets
from obliviate.errors import DataError
from obliviate.eval.suite import qa_correct, qa_item_prompt, starts_with_words
from obliviate.tasks.base import Data, EvalSet, Task
from obliviate.tasks.world import cloze_parts, task_from_world

FACT = {
    "id": "forget-000-treated_with",
    "question": "What is Zalosis treated with?",
    "question_paraphrase": "Which drug is used to treat Zalosis?",
    "answer": "It is treated with vruroxil.",
    "answer_paraphrase": "Doctors give vruroxil to patients with Zalosis.",
    "value": "vruroxil",
    "answer_spans": [[0, 18, "structural"], [18, 27, "specific"], [27, 28, "structural"]],
}


def test_cloze_stops_right_before_the_value(small_world):
    assert cloze_parts(FACT) == ("It is treated with", "vruroxil")
    task = task_from_world(small_world)
    cloze = next(es for es in task.evals if es.name == "forget_cloze")
    item = cloze.items[0]
    fact = next(f for f in small_world.facts if f["id"] == item.meta["fact_id"])
    prompt = qa_item_prompt(task, item)
    assert prompt == f"Question: {fact['question']}\nAnswer: {cloze_parts(fact)[0]}"
    assert (prompt + " " + fact["value"]).startswith(prompt) and fact["value"] not in prompt.split("Answer:")[1]


def test_cloze_without_a_specific_span_is_an_error():
    with pytest.raises(DataError, match="specific"):
        cloze_parts({**FACT, "answer_spans": [[0, 28, "structural"]]})


def test_starts_with_words_compares_whole_normalised_words():
    assert starts_with_words(" vruroxil.", "vruroxil")
    assert starts_with_words(" Dry coughing, mostly", "dry coughing")
    assert not starts_with_words(" vruroxils", "vruroxil")
    assert not starts_with_words(" dry", "dry coughing")
    assert not starts_with_words("", "vruroxil")


def test_alternative_answers_count_as_right():
    item = {"question": "q", "answer": "It is treated with vruroxil.",
            "meta": {"alternatives": ["Doctors give vruroxil to patients with Zalosis."]}}
    assert qa_correct(" doctors give vruroxil to patients with zalosis", item)
    assert qa_correct("It is treated with vruroxil.", item)
    assert not qa_correct("It is treated with nothing.", item)


def test_the_world_lists_its_formats_as_variants(small_world):
    task = task_from_world(small_world)
    names = {es.name for es in variant_sets(task)}
    assert names == {"forget_para_qa", "forget_mcq", "forget_mcq_letters", "forget_cloze"}
    assert [es.name for es in task.evals_by_role("forget", variants=False)] == ["forget_qa"]


def test_a_task_without_variants_has_no_format_shift(tiny_model, tiny_tokenizer):
    task = Task("t", forget=Data(qa=[("a", "b")]), retain=Data(qa=[("c", "d")]),
                evals=[EvalSet("forget_qa", "forget", "qa", [{"question": "a", "answer": "b"}])])
    with pytest.raises(DataError, match="variant"):
        format_shift_attack(tiny_model, tiny_tokenizer, task)


def test_the_counts_are_the_best_sets_items_and_the_variant_sets(small_world, world_tokenizer, world_model,
                                                                 cut_forget):
    """Sets of different sizes (one cut to 5): the read counts the items of the set it is, over all the sets."""
    task = cut_forget(task_from_world(small_world), 5, "forget_cloze")
    sizes = {es.name: len(es.items) for es in variant_sets(task)}
    assert sizes == {"forget_para_qa": 24, "forget_mcq": 12, "forget_mcq_letters": 12, "forget_cloze": 5}
    res = format_shift_attack(world_model, world_tokenizer, task)
    assert res["format_shift_items"] == sizes[res["format_shift_set"]] and res["format_shift_variants"] == 4
    for best, key in (("forget_cloze", "forget_cloze_em"), ("forget_para_qa", "forget_para_qa_em")):
        m = {"forget_para_qa_em": 0.0, "forget_mcq_acc": 0.25, "forget_mcq_letters_acc": 0.25, "forget_cloze_em": 0.0,
             key: 0.5}  # the given evaluation decides which set is best
        res = format_shift_attack(world_model, world_tokenizer, task, metrics=m)
        assert (res["format_shift_set"], res["format_shift_items"], res["format_shift_variants"]) == \
            (best, sizes[best], 4)
