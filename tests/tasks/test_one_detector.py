"""Issue #56, item 5: one file-format detector serves ``eval --data``, ``--utility`` and the task spec's files alike
(:mod:`obliviate.tasks.sources.detect`). Other users' files, in the shapes public releases ship them (MedQA, MedMCQA,
ARC, Winogrande, HellaSwag, TOFU, MMLU-style CSV, ...): every way of giving a file reads the same items from it, each
MCQ's correct choice as worked out by hand below; a file none can read is one line naming the file, the record
(1-based), the fields seen and the mapping that would name them, in the syntax of the interface used, and that
mapping then reads it."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pytest

from obliviate.cli.main import main
from obliviate.errors import DataError
from obliviate.tasks import load_task
from obliviate.tasks.benchmark import benchmark_task
from obliviate.tasks.files import build_file_task, task_from_files
from obliviate.tasks import sources
from obliviate.tasks.sources import load_records
from obliviate.tasks.sources.detect import FieldsUnknown
from tests._cli_errors import one_error
from tests._run_dirs import tiny_model_dir

ABCD = ["Paris", "Rome", "Oslo", "Bern"]


def jsonl(recs) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


def csv_text(header, rows) -> str:
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


# name -> (file text, [(question, choices, answer index)] worked out by hand)
MCQ_FILES = {
    # MedQA (jind11/MedQA, US): options keyed A-E, answer_idx a letter, answer the text, extra list fields
    "medqa.jsonl": (jsonl([{"question": "Capital of France?", "answer": "Paris", "options": dict(zip("ABCD", ABCD)),
                            "meta_info": "step1", "answer_idx": "A", "metamap_phrases": ["capital", "France"]},
                           {"question": "Capital of Norway?", "answer": "Oslo", "options": dict(zip("ABCD", ABCD)),
                            "meta_info": "step1", "answer_idx": "C", "metamap_phrases": ["Norway"]}]),
                    [("Capital of France?", ABCD, 0), ("Capital of Norway?", ABCD, 2)]),
    # options as a list and the answer a letter
    "letters.jsonl": (jsonl([{"question": "Capital of Italy?", "options": ABCD, "answer": "B"}]),
                      [("Capital of Italy?", ABCD, 1)]),
    # a JSON array, choices a list, a 0-based integer label
    "array.json": (json.dumps([{"q": "Capital of Switzerland?", "choices": ABCD, "label": 3},
                               {"q": "Capital of France?", "choices": ABCD, "label": 0}]),
                   [("Capital of Switzerland?", ABCD, 3), ("Capital of France?", ABCD, 0)]),
    # MMLU-style CSV: one column per choice, A..D, and the answer's letter
    "columns.csv": (csv_text(["question", "A", "B", "C", "D", "answer"],
                             [["Capital of Norway?", *ABCD, "C"], ["Capital of Italy?", *ABCD, "B"]]),
                    [("Capital of Norway?", ABCD, 2), ("Capital of Italy?", ABCD, 1)]),
    # MedMCQA's hub fields: opa..opd and cop, a 0-based index (a 0 in the file says so)
    "medmcqa.csv": (csv_text(["question", "opa", "opb", "opc", "opd", "cop", "subject_name"],
                             [["Capital of Italy?", *ABCD, "1", "geo"], ["Capital of France?", *ABCD, "0", "geo"]]),
                    [("Capital of Italy?", ABCD, 1), ("Capital of France?", ABCD, 0)]),
    # a 1-based index: no answer is 0 and one is 4 of 4 choices, which only a 1-based index can be
    "one_based.jsonl": (jsonl([{"question": "Capital of Switzerland?", "choices": ABCD, "correct_option": 4},
                               {"question": "Capital of France?", "choices": ABCD, "correct_option": 1}]),
                        [("Capital of Switzerland?", ABCD, 3), ("Capital of France?", ABCD, 0)]),
    # a TSV with columns A..D and a 1-based index as text
    "one_based.tsv": ("question\tA\tB\tC\tD\tcorrect\n" + "".join(f"{q}\t" + "\t".join(ABCD) + f"\t{k}\n" for q, k in
                                                                     (("Capital of Switzerland?", 4),
                                                                      ("Capital of Italy?", 2))),
                      [("Capital of Switzerland?", ABCD, 3), ("Capital of Italy?", ABCD, 1)]),
    # ARC: choices {text, label} with labels 1..3, answerKey a label (not a letter, not an index)
    "arc.jsonl": (jsonl([{"id": "Q1", "question": "Which is a gas?",
                          "choices": {"text": ["rock", "steam", "ice"], "label": ["1", "2", "3"]}, "answerKey": "2"}]),
                  [("Which is a gas?", ["rock", "steam", "ice"], 1)]),
    # Winogrande: sentence, option1/option2, answer "1"/"2" (1-based, as strings)
    "winogrande.jsonl": (jsonl([{"sentence": "The cup fell off the table because _ was tilted.", "option1": "cup",
                                 "option2": "table", "answer": "2"},
                                {"sentence": "The key opened the box because _ fit.", "option1": "key",
                                 "option2": "box", "answer": "1"}]),
                         [("The cup fell off the table because _ was tilted.", ["cup", "table"], 1),
                          ("The key opened the box because _ fit.", ["key", "box"], 0)]),
    # HellaSwag: ctx, endings, label a string index
    "hellaswag.jsonl": (jsonl([{"ctx": "He picks up the violin and", "endings": ["eats it.", "plays a tune.",
                                                                                 "sells the car."], "label": "1"}]),
                        [("He picks up the violin and", ["eats it.", "plays a tune.", "sells the car."], 1)]),
    # TOFU's real_authors: option1..option4 and the answer's text
    # TOFU's real_authors (JSON Lines named .json): option1..option4 and the answer's text
    "real_authors.json": (jsonl([{"question": "Who wrote Hamlet?", "answer": "Shakespeare", "option1": "Dickens",
                                  "option2": "Shakespeare", "option3": "Austen", "option4": "Tolkien"},
                                 {"question": "Who wrote Emma?", "answer": "Austen", "option1": "Dickens",
                                  "option2": "Shakespeare", "option3": "Austen", "option4": "Tolkien"}]),
                          [("Who wrote Hamlet?", ["Dickens", "Shakespeare", "Austen", "Tolkien"], 1),
                           ("Who wrote Emma?", ["Dickens", "Shakespeare", "Austen", "Tolkien"], 2)]),
    # a JSON object holding the records under one key; the answer the text of a choice
    "wrapped.json": (json.dumps({"version": 2, "data": [{"prompt": "Capital of Norway?", "candidates": ABCD,
                                                          "gold": "Oslo"}]}),
                     [("Capital of Norway?", ABCD, 2)]),
}


def qa_file(root):
    path = root / "forget.jsonl"
    path.write_text(jsonl([{"question": f"Who is F{i}?", "answer": f"f{i}"} for i in range(4)]))
    return path


def read_every_way(path, root):
    """The items each way of giving ``path`` reads: ``eval --data`` (a benchmark task of the file), ``--utility``
    (the files shorthand), a task spec's ``evals`` entry, and :func:`load_records`."""
    forget = qa_file(root)
    data = benchmark_task(data=path).evals[0]
    utility = next(e for e in task_from_files([str(forget)], utility=[str(path)]).evals if e.role == "utility")
    spec = next(e for e in build_file_task("t", root, {"forget": [str(forget)],
                                                      "evals": [{"path": str(path), "role": "utility"}]}).evals
                if e.role == "utility")
    return {"--data": data, "--utility": utility, "spec": spec, "load_records": load_records(path)}


@pytest.mark.parametrize("name", sorted(MCQ_FILES))
def test_every_way_of_giving_an_mcq_file_reads_the_same_items(name, tmp_path):
    text, want = MCQ_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    for how, got in read_every_way(path, tmp_path).items():
        items = got if isinstance(got, list) else got.items
        assert [(x.question, x.choices, x.answer_index) for x in items] == want, how
        if not isinstance(got, list):
            assert got.kind == "mcq" and got.name == f"utility_{path.stem}", how


QA_FILES = {
    "chat.jsonl": (jsonl([{"prompt": "Who is A?", "response": "Ann."}]), [("Who is A?", "Ann.")]),
    "alpaca.json": (json.dumps([{"instruction": "Name B.", "input": "", "output": "Bo."}]), [("Name B.", "Bo.")]),
    "plain.csv": (csv_text(["question", "answer"], [["Who is C?", "Cy."]]), [("Who is C?", "Cy.")]),
    # preference pairs: the rejected answer is the answer (the chosen one stays in the record)
    "prefs.jsonl": (jsonl([{"prompt": "Who is D?", "chosen": "I cannot say.", "rejected": "Di."}]),
                    [("Who is D?", "Di.")]),
}


@pytest.mark.parametrize("name", sorted(QA_FILES))
def test_every_way_of_giving_a_qa_file_reads_the_same_pairs(name, tmp_path):
    text, want = QA_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    for how, got in read_every_way(path, tmp_path).items():
        items = got if isinstance(got, list) else got.items
        assert [(x.question, x.answer) for x in items] == want, how
    forget = task_from_files([str(path)], retain_holdout=0)  # as training data, too
    assert forget.forget.qa == want


def test_index_base_in_the_mapping_says_what_the_file_cannot(tmp_path):
    """Answers 1..3 of 4 choices could count from 0 or 1: read from 0, unless the mapping says index_base=1."""
    path = tmp_path / "ambiguous.jsonl"
    path.write_text(jsonl([{"question": f"Q{k}?", "choices": ABCD, "answer": k} for k in (1, 3, 2)]))
    assert [x.answer_index for x in load_records(path)] == [1, 3, 2]
    assert [x.answer_index for x in load_records(path, mapping="index_base=1")] == [0, 2, 1]
    assert [x.answer_index for x in benchmark_task(data=path, mapping="index_base=1").evals[0].items] == [0, 2, 1]
    path.write_text(jsonl([{"question": "Q?", "choices": ABCD, "answer": 0}]))
    with pytest.raises(DataError, match="line 1: field 'answer' = 0 is out of range for 4 choices .*count from 1"):
        load_records(path, mapping="index_base=1")


ABC = ABCD[:3]


def _mcq_file(tmp_path, fmt: str, answers: list) -> object:
    """An MCQ file of choices ABC, one question per answer, as JSON Lines, a JSON array or CSV (columns A, B, C)."""
    recs = [{"question": f"Q{i}?", "choices": ABC, "answer": a} for i, a in enumerate(answers, 1)]
    path = tmp_path / f"quiz.{fmt}"
    if fmt == "csv":
        path.write_text(csv_text(["question", "A", "B", "C", "answer"],
                                 [[r["question"], *ABC, str(r["answer"])] for r in recs]))
    else:
        path.write_text(jsonl(recs) if fmt == "jsonl" else json.dumps(recs))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_the_answer_key_is_the_same_with_any_limit(fmt, tmp_path):
    """Whether answer indices count from 0 or 1 is told from the whole file, not from the records a limit lets it read:
    answers 1, 2, 3 of 3 choices are 1-based (only the last, 3 of 3, says so), at every limit."""
    path = _mcq_file(tmp_path, fmt, [1, 2, 3])
    assert [x.answer_index for x in load_records(path)] == [0, 1, 2]
    for limit in (1, 2, 3):
        assert [x.answer_index for x in load_records(path, limit=limit)] == [0, 1, 2][:limit], limit
        got = benchmark_task(data=path, limit=limit).evals[0].items
        assert [x.answer_index for x in got] == [0, 1, 2][:limit], limit
    # the other way round: a 0 past the limit makes the file 0-based, and its first answer (3 of 3) out of range
    path = _mcq_file(tmp_path, fmt, [3, 1, 0])
    where = {"jsonl": "quiz.jsonl line 1", "json": "quiz.json record 1", "csv": "quiz.csv line 2"}[fmt]
    for limit in (None, 1, 2):
        with pytest.raises(DataError, match=f"^{where}: field 'answer' = 3 is out of range for 3 choices$"):
            load_records(path, limit=limit)


def test_a_record_past_the_limit_that_cannot_be_read_ends_the_look_at_answers(tmp_path):
    """A limit still reads no broken record past it: the look at the answers stops there, as a whole read would."""
    path = tmp_path / "quiz.jsonl"
    path.write_text(jsonl([{"question": f"Q{k}?", "choices": ABC, "answer": k} for k in (1, 3)]) + "{oops\n")
    assert [x.answer_index for x in load_records(path, limit=1)] == [0]
    assert [x.answer_index for x in load_records(path, limit=2)] == [0, 2]
    with pytest.raises(DataError, match="quiz.jsonl line 3: invalid JSON"):
        load_records(path)


def test_a_file_that_does_not_say_its_index_base_is_read_from_0_and_says_so(tmp_path, caplog):
    """No answer is 0 and none equals its record's number of choices: read 0-based, in one log line that says how to
    read it 1-based (whatever the limit); a file with a 0, or with letters, says nothing."""
    path = _mcq_file(tmp_path, "jsonl", [1, 2, 1])
    for limit in (None, 1):
        caplog.clear()
        with caplog.at_level("INFO", logger="obliviate"):
            assert [x.answer_index for x in load_records(path, limit=limit)] == [1, 2, 1][:limit]
        lines = [r.getMessage() for r in caplog.records if "index" in r.getMessage()]
        assert lines == ["quiz.jsonl: answer indices read as 0-based, though the file does not say (none is 0, and "
                         "none equals its record's number of choices); index_base=1 in the mapping reads them as "
                         "1-based"]
        assert [x.answer_index for x in load_records(path, limit=limit, mapping="index_base=1")] == [0, 1, 0][:limit]
    for answers in ([1, 0, 2], ["B", "A", "C"]):
        caplog.clear()
        with caplog.at_level("INFO", logger="obliviate"):
            load_records(_mcq_file(tmp_path, "jsonl", answers), limit=1)
        assert not [r for r in caplog.records if "index" in r.getMessage()], answers


def test_an_mcq_with_a_letter_answer_is_never_read_as_a_qa_pair_for_training(tmp_path):
    """Training data try QA pairs first; an MCQ whose answer is a letter ("B") is no QA pair, and says so."""
    path = tmp_path / "quiz.jsonl"
    path.write_text(MCQ_FILES["letters.jsonl"][0])
    with pytest.raises(DataError, match="MCQ records cannot be forget training data"):
        task_from_files([str(path)])
    path.write_text(MCQ_FILES["real_authors.json"][0])  # the answer is a choice's text: the question and its answer
    assert task_from_files([str(path)], retain_holdout=0).forget.qa == [("Who wrote Hamlet?", "Shakespeare"),
                                                                         ("Who wrote Emma?", "Austen")]


ODD = {"id": 1, "prompt_text": "Capital of Italy?", "wrong": "Oslo", "right": "Rome", "gold": "Rome"}


@pytest.mark.parametrize("name,text,where", [
    ("odd.jsonl", jsonl([ODD]), "odd.jsonl line 1"),
    ("odd.json", json.dumps([ODD, ODD]), "odd.json record 1"),
    ("odd.csv", csv_text(list(ODD), [list(map(str, ODD.values()))]), "odd.csv line 2"),
])
def test_a_file_none_can_read_is_one_line_with_the_mapping_that_reads_it(name, text, where, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError) as err:
        load_records(path, "mcq")
    assert str(err.value) == (f"{where}: cannot find the question and the choices of an MCQ among its fields (id, "
                              "prompt_text, wrong, right, gold); name them with mapping='question=FIELD,choices=FIELD'")
    (ex, *_) = load_records(path, "mcq", "question=prompt_text,choices=right+wrong")  # the fields it asked for
    assert ex.question == "Capital of Italy?" and ex.choices[ex.answer_index] == "Rome"
    with pytest.raises(DataError) as err:  # a task spec's entry: the spec's syntax
        load_task(f"file:{_spec(tmp_path, name)}")
    assert f"{where}: cannot tell whether it holds" in str(err.value) and f"{{path: {name}, " in str(err.value)


def test_the_hint_is_worded_for_the_interface_named_and_only_those():
    """One signature: ``hint(how)``, ``how`` one of cli, spec, api; anything else is refused, not read as Python's."""
    err = FieldsUnknown("odd.jsonl", "odd.jsonl line 1", ["stem", "first"], "mcq", ["choices"])
    what = "odd.jsonl line 1: cannot find the choices of an MCQ among its fields (stem, first); "
    assert err.hint("cli") == what + "name them with --mapping odd.jsonl=choices=FIELD"
    assert err.hint("spec") == what + "give its entry a mapping (and kind), e.g. {path: odd.jsonl, kind: mcq, " \
                                      "mapping: 'choices=FIELD'}"
    assert err.hint("api") == str(err) == what + "name them with mapping='choices=FIELD'"
    for how in ("CLI", "python", True):
        with pytest.raises(ValueError, match="expected 'cli', 'spec' or 'api'"):
            err.hint(how)


def test_the_sources_define_each_constant_once():
    """A constant of the readers (the choice letters A-J, say) lives in one module of tasks/sources; the others
    import it."""
    where: dict[str, list[str]] = {}
    for path in sorted(Path(sources.__file__).parent.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for t in targets:
                if isinstance(t, ast.Name) and t.id.isupper():
                    where.setdefault(t.id, []).append(path.name)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}


def _spec(root, name):
    forget = qa_file(root)
    spec = root / "spec.yaml"
    spec.write_text(f"forget: [{forget.name}]\nutility: [{name}]\n")
    return spec


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("m"))


def test_eval_data_reads_a_medqa_file_as_utility_does_and_names_the_score_for_it(model, tmp_path, capsys):
    """The researcher's case: ``--data medqa.jsonl --kind mcq`` said "missing field 'choices'"; now it reads the file
    ``--utility`` reads, and the scores say what they read."""
    path = tmp_path / "medqa.jsonl"
    path.write_text(MCQ_FILES["medqa.jsonl"][0])
    for kind in (["--kind", "mcq"], []):
        out = tmp_path / f"ev{len(kind)}"
        assert main(["eval", "--data", str(path), *kind, "--model", str(model), "--out", str(out),
                     "--no-progress"]) in (0, None), capsys.readouterr().err
        m = json.loads((out / "results.json").read_text())["metrics"]["model"]
        assert "utility_medqa_acc" in m and m["utility_score"] == m["utility_medqa_acc"]
        assert "heldout_keep_score" not in m  # a utility set is no held-out retain item
    odd = tmp_path / "odd.jsonl"
    odd.write_text(jsonl([{"stem": "Capital of Italy?", "first": "Rome", "second": "Oslo", "key": "Rome"}]))
    assert main(["eval", "--data", str(odd), "--kind", "mcq", "--model", str(model), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 2
    line = one_error(capsys)
    assert line.endswith("odd.jsonl line 1: cannot find the choices of an MCQ among its fields (stem, first, second, "
                         "key); name them with --mapping odd.jsonl=choices=FIELD"), line
    assert not (tmp_path / "o").exists()  # before anything is written
    assert main(["eval", "--data", str(odd), "--mapping", "odd.jsonl=choices=first+second", "--model",
                 str(model), "--out", str(tmp_path / "o"), "--no-progress"]) in (0, None)
    m = json.loads((tmp_path / "o" / "results.json").read_text())["metrics"]["model"]
    assert "utility_odd_acc" in m
