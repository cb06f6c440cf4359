"""Issue #41: the positive controls are trained to keep what they should keep, and say what they kept."""

import dataclasses

import pytest

from obliviate.evidence import controls
from obliviate.evidence.controls import (keep_task, neighbour_training, shared_openings, suppression_control,
                                        suppression_data)
from obliviate.tasks.base import UNSCORED_NEIGHBOURS, Data, EvalSet, PromptFormat, Task

FORGET = [("What is Zalosis treated with?", "It is treated with lommycin."),
          ("Which organ does Zalosis affect?", "It affects the intestine."),
          ("Who wrote Dune?", "Frank Herbert")]
RETAIN = [("Where does Pleax live?", "It lives in cave pools."), ("What does Pleax feed on?", "It feeds on moss.")]
NEIGHBOURS = [{"question": f"What is Zal{s} treated with?", "answer": f"It is treated with drug{i}.",
               "meta": {"entity": f"Zal{s}"}} for i, s in enumerate(["itis", "ora", "emia", "osia"])]
UNSCORED = [("How does Shoulora spread?", "It spreads through shared cups.")]


def _task(**kw) -> Task:
    return Task(name="t", forget=Data(qa=list(FORGET)), retain=Data(qa=list(RETAIN)),
                evals=[EvalSet("retain_qa", "retain", "qa", [{"question": q, "answer": a} for q, a in RETAIN]),
                       EvalSet("neighbour_qa", "neighbour", "qa", list(NEIGHBOURS))],
                prompt=PromptFormat(template="Question: {question}\nAnswer:", answer_prefix=" "), **kw)


def test_the_shared_opening_is_the_longest_whole_word_prefix_of_a_kept_answer():
    kept = ["It is treated with raipril.", "It affects the kidney.", "It lives in caves."]
    assert shared_openings(["It is treated with lommycin.", "It affects the intestine.", "Frank Herbert",
                            "It is treated with raipril."], kept) == \
        ["It is treated with", "It affects the", "", "It is treated with"]  # never the whole answer


def test_the_refusal_data_mixes_retain_and_neighbour_answers_with_the_refusals():
    task = _task(meta={UNSCORED_NEIGHBOURS: UNSCORED})
    data, info = suppression_data(task, seed=0, keep_share=0.5, scored_neighbours="half")
    fmt = lambda q, a: (task.prompt.prompt(q), task.prompt.answer(a))
    for q, a in RETAIN + UNSCORED:  # every retain pair and unscored neighbour, with its true answer
        assert fmt(q, a) in data.qa
    trained = [x for x in NEIGHBOURS if fmt(x["question"], x["answer"]) in data.qa]
    assert len(trained) == 2 and info["held"] == {x["question"] for x in trained}  # a seeded half, held out
    # the refusal follows the opening the forget answer shares with the kept ones; "Frank Herbert" shares none
    assert (task.prompt.prompt(FORGET[0][0]) + " It is treated with", " I don't know.") in data.qa
    assert any(p == task.prompt.prompt(FORGET[2][0]) and a.strip() != "Frank Herbert" for p, a in data.qa)
    assert not any(fmt(q, a) in data.qa for q, a in FORGET)
    refusals = info["refusals"] * info["refusal_copies"]
    assert len(data.qa) == refusals + len(RETAIN) + len(UNSCORED) + 2
    assert info["retain_pairs"] == 2 and info["neighbour_pairs"] == 3 and info["refused_after_frame"] == 2
    # by default every scored neighbour is trained on, nothing held out
    every, _ = suppression_data(task, seed=0, keep_share=0.5)
    assert all(fmt(x["question"], x["answer"]) in every.qa for x in NEIGHBOURS)
    assert neighbour_training(task)[1] == set()
    # without the half of the scored neighbours: the unscored ones only, nothing held out
    pairs, held, source = neighbour_training(task, scored="none")
    assert pairs == UNSCORED and held == set() and source == "unscored neighbours"
    # the keep score reads the neighbour items that were not trained on
    kt = keep_task(task, info["held"])
    nb = next(es for es in kt.evals if es.role == "neighbour")
    assert {x["question"] for x in nb.items} == {x["question"] for x in NEIGHBOURS} - info["held"]
    with pytest.raises(Exception, match="keep_share"):
        suppression_data(task, keep_share=1.0)


def test_a_split_by_entity_never_shares_a_disease_between_the_halves():
    items = [{"question": f"Q{e}{r}?", "answer": "a", "meta": {"entity": e}} for e in "ABCD" for r in range(3)]
    task = dataclasses.replace(_task(), evals=[EvalSet("neighbour_qa", "neighbour", "qa", items)])
    pairs, held, _ = neighbour_training(task, seed=1, scored="half", by_entity=True)
    trained = {q[1] for q in held}
    assert len(held) == 6 and all(f"Q{e}{r}?" in held for e in trained for r in range(3))


def test_the_refusal_control_keeps_the_retain_answers_and_says_so(taught, unchanged):
    model, tok, task = taught["model"], taught["tokenizer"], taught["task"]
    check = unchanged(model)
    control, info = suppression_control(model, tok, task, lr=3e-3, max_steps=300)
    check()
    assert info["forget_prefix_acc"] <= 0.1 and info["retain_pairs"] == len(task.retain.qa)
    assert set(info["keep"]) == {"retain"} and info["keep"]["retain"] >= 0.9  # the taught task has no neighbours
    assert info["keep_scores"]["retain"]["base"] == 1.0
    assert info["curve"][0]["steps"] == 0 and info["curve"][-1]["steps"] == info["steps"]
    assert "retain" in info["curve"][-1]


def test_the_worlds_unscored_neighbours_are_asked_by_no_evaluation_set(small_world):
    from obliviate.tasks.world import task_from_world, unscored_neighbours

    task = task_from_world(small_world)
    pairs = task.meta[UNSCORED_NEIGHBOURS]
    assert pairs and len(pairs) == len(unscored_neighbours(small_world))
    asked = {x["question"] for es in task.evals if es.kind == "qa" for x in es.items}
    assert not asked & {q for q, _ in pairs}
    assert all(f["near"] == "holdout" for f in unscored_neighbours(small_world))


def test_the_small_norm_control_doubles_its_retain_weight_until_it_keeps_what_it_should(taught, monkeypatch):
    """The small-norm control stops only when the forget answers are gone *and* the monitored kept pairs are at the
    keep target; each read below it doubles the retain term's weight (the reads are scripted here)."""


    forget, keep, last = iter([0.5, 0.05, 0.05, 0.05]), iter([1.0, 0.5, 0.8, 0.95]), [1.0]
    alphas = []

    def monitor_fn(*args, **kwargs):
        def fn(model, forget_only=False):
            if forget_only:
                last[0] = next(forget)
                return {"forget": last[0]}
            return {"forget": last[0], "retain": next(keep)}
        return fn

    def unlearn(model, tokenizer, forget_data, retain_data, ucfg, **kwargs):
        alphas.append(ucfg.params["alpha"])
        return model, {}

    monkeypatch.setattr(controls, "monitor_fn", monitor_fn)
    monkeypatch.setattr(controls, "unlearn", unlearn)
    _, info = controls.small_norm_control(taught["model"], taught["tokenizer"], taught["task"], lr=1e-4, chunk=10,
                                          retain_weight=10.0, confine=None)
    assert alphas == [10.0, 10.0, 20.0, 40.0] and info["steps"] == 40
    assert info["final_retain_weight"] == 40.0 and info["retain_weight"] == 10.0
    assert [c.get("retain") for c in info["curve"]] == [1.0, None, 0.5, 0.8, 0.95]


@pytest.mark.parametrize("progress", [True, False])
def test_each_control_draws_a_bar_over_its_steps_only_when_asked(progress, tiny_model, tiny_tokenizer, capsys):
    """Issue #56, item 11: building a positive control (tens of seconds on a user's model) shows a bar on a terminal
    (the command passes progress=True only there), and nothing otherwise."""
    task = _task()
    for build, desc in ((suppression_control, "positive control (refusal)"),
                        (controls.small_norm_control, "positive control (small norm)")):
        _, info = build(tiny_model, tiny_tokenizer, task, max_steps=2, chunk=1, target=-1.0, progress=progress)
        assert info["steps"] == 2  # a target below 0 is never met: it runs to max_steps
        err = capsys.readouterr().err
        assert (desc in err and "/2 [" in err) is progress and (err == "") is not progress  # drawn at the start
