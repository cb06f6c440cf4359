"""Generic loading of users' files (JSONL, JSON, CSV/TSV, text) with a field mapping, and the benchmark registry."""

import json

import pytest

from obliviate.tasks.sources import MCQExample, QAExample, TextExample, load_jsonl, load_records, parse_mapping
from obliviate.tasks.sources.benchmarks import BENCHMARKS, benchmark_kind, get_benchmark
from obliviate.errors import ConfigError, DataError
from obliviate.utils import data_dir


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def test_parse_mapping():
    assert parse_mapping("question=prompt, answer = target") == {"question": "prompt", "answer": "target"}
    assert parse_mapping("") == {} and parse_mapping(None) == {}
    for bad in ("question", "question=", "=prompt", "question=a,question=b"):
        with pytest.raises(ConfigError):
            parse_mapping(bad)


def test_qa_with_mapping(tmp_path):
    f = write_jsonl(tmp_path / "mine.jsonl", [
        {"prompt": "Who?", "target": "Me.", "id": 7},
        {"prompt": "Where?", "target": "Here.", "id": 8, "wrong": ["There."]},
    ])
    rows = load_jsonl(f, "qa", "question=prompt,answer=target")
    assert [(r.question, r.answer) for r in rows] == [("Who?", "Me."), ("Where?", "Here.")]
    assert all(isinstance(r, QAExample) and r.split == "mine" for r in rows)
    assert rows[0].meta == {"id": 7}  # unused fields are kept
    # an optional field named in the mapping becomes required
    with pytest.raises(DataError,
                       match="^mine.jsonl line 1: missing field 'wrong' \\(mapped to 'perturbed_answers'\\)"):
        load_jsonl(f, "qa", {"question": "prompt", "answer": "target", "perturbed_answers": "wrong"})


def test_qa_missing_mapped_field(tmp_path):
    f = write_jsonl(tmp_path / "mine.jsonl", [{"prompt": "Who?", "target": "Me."}, {"prompt": "Why?"}])
    with pytest.raises(DataError, match="^mine.jsonl line 2: missing field 'target' \\(mapped to 'answer'\\)"):
        load_jsonl(f, "qa", {"question": "prompt", "answer": "target"})
    with pytest.raises(DataError, match="^mine.jsonl line 2: missing field 'target' \\(mapped to 'answer'\\)"):
        load_jsonl(f, "qa")  # no mapping: the first record's fields tell it, and every record needs them


def test_mcq_with_mapping(tmp_path):
    f = write_jsonl(tmp_path / "quiz.jsonl", [
        {"q": "1+1?", "opts": ["1", "2", "3"], "label": 1},
        {"q": "Capital of France?", "opts": ["Rome", "Paris"], "label": "B"},
        {"q": "Red?", "opts": {"A": "blue", "B": "red"}, "label": "red"},
    ])
    rows = load_jsonl(f, "mcq", {"question": "q", "choices": "opts", "answer_index": "label"})
    assert all(isinstance(r, MCQExample) for r in rows)
    assert [r.answer_index for r in rows] == [1, 1, 1]
    assert [r.answer for r in rows] == ["2", "Paris", "red"]


@pytest.mark.parametrize("label,message", [
    (3, "line 2: field 'label' = 3 is out of range for 3 choices"),
    ("D", "line 2: field 'label' = 'D' is out of range for 3 choices"),
    ("purple", "line 2: field 'label' = 'purple' is not an index, a letter, or exactly one choice"),
    (1.0, "line 2: field 'label' = 1.0 must be an integer index or a letter"),
])
def test_mcq_bad_answer(tmp_path, label, message):
    f = write_jsonl(tmp_path / "quiz.jsonl", [
        {"q": "ok", "opts": ["a", "b", "c"], "label": 0},
        {"q": "bad", "opts": ["a", "b", "c"], "label": label},
    ])
    with pytest.raises(DataError) as e:
        load_jsonl(f, "mcq", "question=q,choices=opts,answer_index=label")
    assert str(e.value) == "quiz.jsonl " + message


def test_generic_bad_json_and_kinds(tmp_path):
    f = write_jsonl(tmp_path / "t.jsonl", [{"text": "hello"}, "{oops", {"text": "bye"}])
    with pytest.raises(DataError, match="^t.jsonl line 2: invalid JSON"):
        load_jsonl(f, "text")
    f = write_jsonl(tmp_path / "t.jsonl", [{"body": "hello"}])
    assert load_jsonl(f, "text", {"text": "body"}, split="docs") == [TextExample("hello", "docs", {})]
    with pytest.raises(ConfigError, match="unknown text field.*'question'"):
        load_jsonl(f, "text", {"question": "body"})
    with pytest.raises(ConfigError, match="unknown example kind 'essay'"):
        load_jsonl(f, "essay")
    with pytest.raises(DataError, match="file not found"):
        load_jsonl(tmp_path / "nope.jsonl")


def test_unknown_benchmark_lists_names():
    with pytest.raises(DataError) as e:
        get_benchmark("wmdp_nuclear")
    msg = str(e.value)
    assert "unknown benchmark 'wmdp_nuclear'" in msg
    for name in ("wmdp_bio", "tofu_forget10", "mmlu", "mmlu:<subject>", "medmcqa", "rtp"):
        assert name in msg
    with pytest.raises(DataError):
        benchmark_kind("nope")


def test_registry_names():
    for name in ("tofu_forget10", "tofu_forget10_perturbed", "wmdp_bio", "wmdp_chem", "wmdp_cyber", "mmlu",
                 "medmcqa", "rtp"):
        assert name in BENCHMARKS
    assert benchmark_kind("mmlu:anatomy") == "mcq" and benchmark_kind("rtp") == "text"


KIND_TYPES = {"qa": QAExample, "mcq": MCQExample, "text": TextExample}


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_registered_benchmark_loads(name):
    if not data_dir().is_dir():
        pytest.skip("no data directory")
    try:
        rows = get_benchmark(name)
    except DataError as e:
        if "file not found" in str(e):
            pytest.skip(str(e))
        raise
    kind = BENCHMARKS[name][0]
    assert rows and all(isinstance(r, KIND_TYPES[kind]) for r in rows)


def test_get_benchmark_mmlu_subject_and_root(tmp_path):
    (tmp_path / "mmlu" / "dev").mkdir(parents=True)
    (tmp_path / "mmlu" / "dev" / "toy_dev.csv").write_text("q,a,b,c,d,C\n")
    rows = get_benchmark("mmlu:toy", root=tmp_path, split="dev")
    assert [(r.subject, r.answer_index, r.split) for r in rows] == [("toy", 2, "mmlu_dev")]
    with pytest.raises(DataError, match="needs a subject"):
        get_benchmark("mmlu:")


# ------------------------------------------------------------------ load_records: formats, mappings, errors

def one_line_error(fn, *args, **kw) -> str:
    with pytest.raises(DataError) as e:
        fn(*args, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


QA = [{"question": "Who?", "answer": "Me."}, {"question": "Where?", "answer": "Here."}]


def test_load_jsonl_is_load_records(tmp_path):
    f = write_jsonl(tmp_path / "a.jsonl", QA)
    assert load_jsonl(f) == load_records(f) and load_jsonl(f, limit=1) == load_records(f)[:1]


@pytest.mark.parametrize("name,body", [
    ("muse.json", json.dumps(QA, indent=2)),  # a JSON array (MUSE)
    ("wrapped.json", json.dumps({"version": 1, "data": QA}, indent=2)),  # one key holds the records
    ("lines.json", "".join(json.dumps(r) + "\n" for r in QA)),  # JSON Lines named .json (TOFU)
    ("pretty.jsonl", json.dumps(QA, indent=2)),  # a pretty-printed array named .jsonl
    ("oneline.jsonl", json.dumps(QA)),
    ("wrapped.jsonl", json.dumps({"data": QA}, indent=2)),
])
def test_json_documents_and_lines(tmp_path, name, body):
    (tmp_path / name).write_text(body, encoding="utf-8")
    rows = load_records(tmp_path / name, "qa")
    assert [(r.question, r.answer, r.split) for r in rows] == [("Who?", "Me.", name.split(".")[0]),
                                                               ("Where?", "Here.", name.split(".")[0])]
    assert rows[0].meta == {}


def test_json_document_errors_name_the_record(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps([QA[0], {"question": "Q?"}]))
    assert one_line_error(load_records, f) == "m.json record 2: missing field 'answer'"
    f.write_text(json.dumps({"a": QA, "b": QA}))
    assert "several keys hold lists of objects ('a', 'b')" in one_line_error(load_records, f)
    f.write_text(json.dumps({"question": "Q?", "choices": ["a", "b"]}))
    assert "m.json: expected a JSON array of records" in one_line_error(load_records, f)
    f.write_text('[\n  {"question": "Q?",\n   "answer": }\n]')
    assert one_line_error(load_records, f).startswith("m.json line 3: invalid JSON (Expecting value")
    f.write_text('[{"question": "Q?", "answer": "A"}] junk')
    assert one_line_error(load_records, f).startswith("m.json line 1: invalid JSON (Extra data")
    f.write_text(json.dumps([QA[0], "text"]))
    assert one_line_error(load_records, f) == "m.json record 2: expected a JSON object, got str"
    f = tmp_path / "m.jsonl"
    f.write_text('[\n  {"question": "Q?", "answer": "A"},\n  {"question": }\n]')  # a pretty array, broken
    assert one_line_error(load_records, f).startswith("m.jsonl line 3: invalid JSON (Expecting value")
    f.write_text('[1, 2]\n{"question": "Q?", "answer": "A"}\n')
    assert one_line_error(load_records, f) == "m.jsonl line 1: expected a JSON object, got list"
    f.write_text('{"question": "Q?", oops}\n{"question": "Q?", "answer": "A"}\n')
    assert one_line_error(load_records, f).startswith("m.jsonl line 1: invalid JSON (Expecting property name")
    f.write_text(json.dumps({"data": []}, indent=2))
    assert one_line_error(load_records, f) == "m.jsonl: no records"


def test_csv_and_tsv(tmp_path):
    f = tmp_path / "quiz.csv"
    f.write_text('q,A,B,C,D,gold,note\n'
                 '"Two\nlines?",w,x,y,z,B,\n'
                 '1+1?,1,2,3,4,1,easy\n', encoding="utf-8")
    rows = load_records(f, "mcq", "question=q,choices=A+B+C+D,answer_index=gold")
    assert [(r.question, r.choices, r.answer_index) for r in rows] == [
        ("Two\nlines?", ["w", "x", "y", "z"], 1), ("1+1?", ["1", "2", "3", "4"], 1)]  # "1" is an index in CSV
    assert rows[1].meta == {"note": "easy"} and rows[0].meta == {"note": ""}
    f.write_text('q,A,B,gold\nok,x,y,A\nbad,x,y,C\n')
    assert one_line_error(load_records, f, "mcq", "question=q,choices=A+B,answer_index=gold") == \
        "quiz.csv line 3: field 'gold' = 'C' is out of range for 2 choices"
    f.write_text('q,A,B,gold\n"Two\nlines",x,y,A\nbad,x,y,Z\n')  # a quoted newline: the record starts on line 4
    assert one_line_error(load_records, f, "mcq", "question=q,choices=A+B,answer_index=gold").startswith(
        "quiz.csv line 4: ")
    f.write_text('question,answer\nWho?,Me.\nWhere?\n')
    assert one_line_error(load_records, f) == "quiz.csv line 3: 1 fields, but the header (line 1) names 2"
    # a list field in one column holds a JSON array; an empty optional cell is absent
    f = tmp_path / "qa.tsv"
    f.write_text('question\tanswer\tperturbed_answers\tparaphrased_answer\n'
                 'Who?\tMe.\t["You.", "Them."]\t\n', encoding="utf-8")
    (row,) = load_records(f, "qa")
    assert row.perturbed_answers == ["You.", "Them."] and row.paraphrased_answer is None
    f.write_text('question\tanswer\tperturbed_answers\nWho?\tMe.\tYou.\n')
    assert one_line_error(load_records, f, "qa").startswith(
        "qa.tsv line 2: field 'perturbed_answers' must be a JSON array of strings")


def test_txt_lines_and_paragraphs(tmp_path):
    f = tmp_path / "forget.txt"
    f.write_text("First line.\nSecond line.\n\n\nThird, after blanks.\n", encoding="utf-8")
    assert [r.text for r in load_records(f, "text")] == ["First line.", "Second line.", "Third, after blanks."]
    paras = ["First line.\nSecond line.", "Third, after blanks."]
    assert [r.text for r in load_records(f, "text", "split_by=blank")] == paras
    assert [r.text for r in load_records(f, "text", split_by="blank")] == paras
    assert all(r.split == "forget" for r in load_records(f, "text"))
    for kind in ("qa", "mcq"):
        assert one_line_error(load_records, f, kind).startswith("forget.txt: a .txt file holds plain text")
    with pytest.raises(ConfigError, match="split_by='para'"):
        load_records(f, "text", "split_by=para")
    with pytest.raises(ConfigError, match="applies to .txt files"):
        load_records(write_jsonl(tmp_path / "a.jsonl", QA), "qa", "split_by=blank")


def test_choices_from_several_fields(tmp_path):
    """WMDP/MUSE-style: the correct choice in one field, the wrong ones in another."""
    f = write_jsonl(tmp_path / "tf.jsonl", [
        {"q": "Sky?", "true_answer": "blue", "false_answer": ["green", "red"]},
        {"q": "Grass?", "true_answer": ["green"], "false_answer": ["blue", "red"]},
        {"q": "Same text twice?", "true_answer": "x", "false_answer": ["x", "y"]},  # position, not text
    ])
    # the right answer's field plus the wrong ones': the options are shuffled, seeded by the question (issue #28:
    # in the concatenated order the answer was always A, and a random model's preference for A was its score)
    rows = load_records(f, "mcq", "question=q,choices=true_answer+false_answer,answer=true_answer")
    assert [(sorted(r.choices), r.answer) for r in rows] == [
        (["blue", "green", "red"], "blue"), (["blue", "green", "red"], "green"), (["x", "x", "y"], "x")]
    assert rows[0].meta == {}
    again = load_records(f, "mcq", "question=q,choices=true_answer+false_answer,answer=true_answer")
    assert [(r.choices, r.answer_index) for r in again] == [(r.choices, r.answer_index) for r in rows]
    rows = load_records(f, "mcq", "question=q,choices=false_answer+true_answer,answer=true_answer")
    assert [r.answer for r in rows] == ["blue", "green", "x"]
    # answer naming a field outside the choices: matched by text; answer_index still works
    f = write_jsonl(tmp_path / "g.jsonl", [{"q": "Sky?", "a": "blue", "b": "red", "gold": "red", "i": 1}])
    assert load_records(f, "mcq", "question=q,choices=a+b,answer=gold")[0].answer_index == 1
    assert load_records(f, "mcq", "question=q,choices=a+b,answer_index=i")[0].answer_index == 1
    assert load_records(f, "mcq", "question=q,choices=a+b,answer_index=i,answer=gold")[0].answer_index == 1
    assert one_line_error(load_records, f, "mcq", "question=q,choices=a+b,answer_index=i,answer=a") == \
        "g.jsonl line 1: field 'i' says choice B but field 'a' says choice A"
    assert one_line_error(load_records, f, "mcq", "question=q,choices=a+nope,answer=gold") == \
        "g.jsonl line 1: missing field 'nope' (mapped to 'choices')"
    f = write_jsonl(tmp_path / "h.jsonl", [{"question": "Sky?", "choices": ["blue", "red"], "answer": "red"}])
    assert load_records(f, "mcq")[0].answer_index == 1  # no answer_index: 'answer' is the correct text
    f = write_jsonl(tmp_path / "h.jsonl", [{"question": "Sky?", "choices": ["blue", "red"]}])
    assert one_line_error(load_records, f, "mcq") == \
        "h.jsonl line 1: cannot find the correct choice (an index, a letter or its text) of an MCQ among its fields " \
        "(question, choices); name them with mapping='answer_index=FIELD'"
    f = write_jsonl(tmp_path / "h.jsonl", [{"question": "Sky?", "a": "blue", "b": 3, "answer": "blue"}])
    assert one_line_error(load_records, f, "mcq", "choices=a+b") == \
        "h.jsonl line 1: field 'b' must be a string or a list of strings"


@pytest.mark.parametrize("choices,answer,index", [
    (["B", "A"], "A", 1),  # the text of a choice wins over the letter reading
    (["b", "a"], "a", 1),
    (["apple", "banana"], "b", 1),  # not a choice's text: a letter, either case
    (["apple", "banana"], "B", 1),
    (["a", "b", "c"], "C", 2),  # text match is exact; "C" is not a choice, so it is a letter
    (["apple", "banana"], "banana", 1),
    (["apple", "banana"], 0, 0),
])
def test_letter_or_text_answer(tmp_path, choices, answer, index):
    f = write_jsonl(tmp_path / "l.jsonl", [{"question": "Q?", "choices": choices, "answer_index": answer}])
    assert load_records(f, "mcq")[0].answer_index == index
    f = write_jsonl(tmp_path / "l.jsonl", [{"question": "Q?", "choices": choices, "gold": answer}])
    assert load_records(f, "mcq", "answer=gold")[0].answer_index == index


def test_limit_stops_reading(tmp_path):
    # line 3 is broken (bad JSON / not UTF-8 / short row): with limit=2 it is never read
    f = write_jsonl(tmp_path / "a.jsonl", QA + ["{oops"])
    assert len(load_records(f, limit=2)) == 2
    assert "line 3: invalid JSON" in one_line_error(load_records, f, limit=3)
    f = tmp_path / "a.csv"
    f.write_bytes(b"question,answer\nWho?,Me.\nWhere?,Here.\n\xff\xfe,x\n")
    assert [r.question for r in load_records(f, limit=2)] == ["Who?", "Where?"]
    f = tmp_path / "a.txt"
    f.write_bytes(b"one\ntwo\n\xff\n")
    assert [r.text for r in load_records(f, "text", limit=2)] == ["one", "two"]
    assert len(load_records(write_jsonl(tmp_path / "b.json", QA), limit=1)) == 1
    with pytest.raises(ConfigError, match="limit=0"):
        load_records(f, "text", limit=0)


@pytest.mark.parametrize("name,body,message", [
    ("u.jsonl", b'{"question": "a", "answer": "b"}\n{"question": "\xe9", "answer": "b"}\n',
     "u.jsonl line 2: not valid UTF-8"),
    ("u.json", b'[\n{"question": "a", "answer": "b"},\n{"question": "\xe9"}]', "u.json line 3: not valid UTF-8"),
    ("u.csv", b"question,answer\na,b\n\xe9,b\n", "u.csv line 3: not valid UTF-8"),
    ("u.txt", b"fine\n\xe9\n", "u.txt line 2: not valid UTF-8"),
    ("deep.jsonl", b'{"question": "a", "answer": ' + b"[" * 100000 + b"\n",
     "deep.jsonl line 1: invalid JSON (nested too deeply)"),
    ("deep.json", b"[" * 100000, "deep.json: invalid JSON (nested too deeply)"),
    ("big.jsonl", b'{"question": "a", "answer": ' + b"1" * 5000 + b"}\n",
     "big.jsonl line 1: invalid JSON (a number too large"),
    ("big.json", b'[{"question": "a", "answer": ' + b"1" * 5000 + b"}]",
     "big.json: invalid JSON (a number too large"),
    ("x.parquet", b"PAR1", "x.parquet: unsupported file type '.parquet'"),
    ("e.jsonl", b'{"question": " ", "answer": "b"}\n', "e.jsonl line 1: field 'question' is empty"),
    ("e.csv", b"question,answer\nWho?,\n", "e.csv line 2: field 'answer' is empty"),
    ("empty.jsonl", b"\n\n", "empty.jsonl: no records"),
])
def test_errors_are_one_line_naming_the_file(tmp_path, name, body, message):
    (tmp_path / name).write_bytes(body)
    assert one_line_error(load_records, tmp_path / name, "text" if name.endswith(".txt") else "qa").startswith(
        message)


def test_mcq_choice_errors(tmp_path):
    f = write_jsonl(tmp_path / "c.jsonl", [{"question": "Q?", "choices": list("abcdefghijk"), "answer_index": 0}])
    assert one_line_error(load_records, f, "mcq") == \
        "c.jsonl line 1: field 'choices' has 11 choices; at most 10 (A-J) are supported"
    f = write_jsonl(tmp_path / "c.jsonl", [{"question": "Q?", "choices": list("abcdefghij"), "answer_index": "J"}])
    assert load_records(f, "mcq")[0].answer_index == 9
    f = write_jsonl(tmp_path / "c.jsonl", [{"question": "Q?", "choices": ["a", ""], "answer_index": 0}])
    assert one_line_error(load_records, f, "mcq") == "c.jsonl line 1: field 'choices' has an empty choice (entry 2)"
    f = write_jsonl(tmp_path / "c.jsonl", [{"question": "", "choices": ["a", "b"], "answer_index": 0}])
    assert one_line_error(load_records, f, "mcq") == "c.jsonl line 1: field 'question' is empty"
    f = write_jsonl(tmp_path / "c.jsonl", [{"question": "Q?", "choices": ["a", "a"], "answer_index": "a"}])
    assert one_line_error(load_records, f, "mcq") == "c.jsonl line 1: field 'answer_index' = 'a' matches 2 choices"
    f = write_jsonl(tmp_path / "c.jsonl", [{"question": "Q?", "choices": ["a", "b"], "gold": ""}])
    assert one_line_error(load_records, f, "mcq", "answer=gold") == "c.jsonl line 1: field 'gold' is empty"


def test_right_plus_wrong_options_are_not_always_first(tmp_path):
    """40 questions built as choices=true_answer+false_answer: the answer lands on every letter, about evenly."""
    recs = [{"q": f"Question {i}?", "true_answer": f"right {i}", "false_answer": [f"wrong {i}{c}" for c in "abc"]}
            for i in range(40)]
    rows = load_records(write_jsonl(tmp_path / "m.jsonl", recs), "mcq",
                       "question=q,choices=true_answer+false_answer,answer=true_answer")
    assert all(r.answer == f"right {i}" for i, r in enumerate(rows))
    counts = [sum(r.answer_index == k for r in rows) for k in range(4)]
    assert min(counts) >= 4 and max(counts) <= 18  # was [40, 0, 0, 0]
    # a file's own order with an index (choices=A+B+C+D,answer_index=gold) is kept
    f = write_jsonl(tmp_path / "o.jsonl", [{"q": "Sky?", "A": "red", "B": "blue", "gold": "B"}])
    row = load_records(f, "mcq", "question=q,choices=A+B,answer_index=gold")[0]
    assert (row.choices, row.answer_index) == (["red", "blue"], 1)
