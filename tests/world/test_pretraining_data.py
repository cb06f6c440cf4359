"""What the world's pretraining trains on (obliviate.train.pretrain): which wordings, never the evaluation's."""

from obliviate.data import qa_answer, qa_prompt
from obliviate.eval.core import LETTERS
from obliviate.train.pretrain import QA_FORMS, mcq_pairs_for, qa_pairs_for, statement_completions


def test_qa_term_has_every_trained_wording_and_no_held_out_one(world):
    pairs = qa_pairs_for(world, forms=QA_FORMS)
    prompts = {p for p, _ in pairs}
    assert len(prompts) == len(pairs)
    for f in world.facts:
        trained = f["split"] != "holdout"
        for q in [f["question"], *f["train_questions"]]:
            assert ((qa_prompt(q), qa_answer(f["answer"])) in pairs) == trained, (f["id"], q)
        for q in f["question_paraphrases"]:
            assert qa_prompt(q) not in prompts, q
        for prefix, rest in statement_completions(f):
            assert ((prefix, rest) in pairs) == trained
    canonical = qa_pairs_for(world)  # the default form: the canonical QA only
    assert sorted(canonical) == sorted((qa_prompt(f["question"]), qa_answer(f["answer"])) for f in world.facts
                                       if f["split"] != "holdout")


def test_statement_completions_cut_a_statement_before_its_value(world):
    n = 0
    for f in world.facts:
        for prefix, rest in statement_completions(f):
            assert prefix + rest in f["statements"] or prefix + rest[1:] in f["statements"]
            assert f["entity"] in prefix and rest.startswith(" " + f["value"])
            n += 1
    assert n >= len(world.facts)  # at least one per fact on average


def test_oracle_qa_term_has_no_forget_fact(world):
    forget = [f for f in world.facts if f["split"] == "forget"]
    pairs = qa_pairs_for(world, exclude_splits=("forget",), forms=QA_FORMS)
    prompts = {p for p, _ in pairs}
    for f in forget:
        assert qa_prompt(f["question"]) not in prompts
        assert not any(f["value"] in rest and f["entity"] in p for p, rest in pairs), f["id"]


def test_mcq_term_never_asks_a_forget_fact(world):
    pairs = mcq_pairs_for(world)
    assert len(pairs) == len(world.practice_mcqs())
    forget_questions = {f["question"] for f in world.facts if f["split"] in ("forget", "holdout")}
    for f in world.facts:
        if f["split"] in ("forget", "holdout"):
            forget_questions.update(f["train_questions"])
    for (prompt, answer), m in zip(pairs, world.practice_mcqs()):
        question = prompt.split("\n")[0]
        assert question == m["question"] and question not in forget_questions
        assert answer == " " + LETTERS[m["answer_index"]]
        line = prompt.split("\n")[1 + m["answer_index"]]
        fact = next(f for f in world.facts if f["id"] == m["fact_id"])
        assert line == f"{answer.strip()}. {fact['answer']}"  # options are whole answer sentences
        assert prompt.endswith("\nAnswer:")
