"""Issue #42, item 3: with ``--forget/--retain`` files and no utility or holdout files, a seeded share of the retain
file is held out for the retain evaluation (never trained on by a method), and the task's summary says so."""

from __future__ import annotations

import json

from obliviate.eval.suite import evaluate_task, score_against
from obliviate.models.builders import tiny_random
from obliviate.tasks.base import Task
from obliviate.tasks.files import RETAIN_HOLDOUT_SHARE, hold_out, task_from_files
from obliviate.train.finetune import training_data


def _write(path, pairs):
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in pairs))
    return str(path)


def _files(tmp_path, n_retain=10):
    forget = _write(tmp_path / "f.jsonl", [(f"Who is F{i}?", f"f{i}") for i in range(4)])
    retain = _write(tmp_path / "r.jsonl", [(f"Who is R{i}?", f"r{i}") for i in range(n_retain)])
    return forget, retain


def test_a_share_of_the_retain_file_is_held_out_for_its_evaluation(tmp_path):
    forget, retain = _files(tmp_path)
    task = task_from_files([forget], [retain])
    evals = {e.name: e for e in task.evals}
    held = [(x["question"], x["answer"]) for x in evals["retain_heldout_qa"].items]
    assert len(held) == 2 == round(RETAIN_HOLDOUT_SHARE * 10) and len(task.retain.qa) == 8
    assert not set(held) & set(task.retain.qa)  # the methods train on task.retain: never on the held-out pairs
    assert evals["retain_heldout_qa"].role == "retain" and evals["retain_heldout_qa"].variant  # -> heldout_keep_score
    assert [(x["question"], x["answer"]) for x in evals["retain_qa"].items] == task.retain.qa
    assert sorted(held + task.retain.qa) == sorted((f"Who is R{i}?", f"r{i}") for i in range(10))
    note = task.summary()["notes"][0]
    assert "2 of 10 QA pairs of the retain files held out" in note
    # what the note says reads them is what does (eval.suite): heldout_keep_score, part of the untrained_keep_score
    # that S-unlearning's R reads; and that finetune trains on them, as training_data below shows
    assert "they make heldout_keep_score and are part of untrained_keep_score, which S-unlearning's R reads" in note
    assert "`obliviate finetune` (and compare's base model and oracle) does train on them" in note
    assert len(evals["forget_qa"].items) == 4  # the forget evaluation is unchanged
    # a fine-tuned base model learns the whole retain file; only the methods never see the held-out pairs
    assert sorted(training_data(task, "retain").qa) == sorted(task.retain.qa + held)
    again = task_from_files([forget], [retain])  # seeded: the same files give the same split
    assert [x["question"] for x in again.evals[2].items] == [x["question"] for x in evals["retain_heldout_qa"].items]


def test_s_unlearning_reads_the_held_out_retain_pairs(tmp_path, tiny_tokenizer):
    forget, retain = _files(tmp_path)
    task = task_from_files([forget], [retain])
    m = evaluate_task(tiny_random("llama", vocab_size=len(tiny_tokenizer), n_layer=1).eval(), tiny_tokenizer, task)
    assert "heldout_keep_score" in m and "retain_heldout_qa_em" in m
    assert m["untrained_keep_score"] == m["heldout_keep_score"]  # nothing else is held out of training here
    held = lambda x: {"heldout_keep_score": x, "untrained_keep_score": x}  # noqa: E731
    base = {**m, "forget_score": 1.0, **held(1.0), "retain_score": 1.0}
    after = {**m, "forget_score": 0.0, **held(0.5), "retain_score": 1.0}  # trained kept, held-out not
    s = score_against(base, after)
    assert s["r"] == 0.5 and s["r_trained"] == 1.0
    assert s["r_source"] == "held-out kept knowledge (held-out retain items)"


def test_nothing_is_held_out_with_utility_or_holdout_files_or_one_pair(tmp_path):
    forget, retain = _files(tmp_path)
    for kw in ({"utility": [retain]}, {"holdout": [forget]}):
        task = task_from_files([forget], [retain], **kw)
        assert len(task.retain.qa) == 10 and "notes" not in task.summary()
    assert "notes" not in task_from_files([forget], [retain], retain_holdout=0.0).summary()
    one = _write(tmp_path / "one.jsonl", [("Who?", "me")])
    assert len(task_from_files([forget], [one]).retain.qa) == 1
    assert hold_out([1, 2, 3], 0.2) == hold_out([1, 2, 3], 0.2) and len(hold_out([1, 2, 3], 0.2)[1]) == 1
    assert isinstance(task, Task)
