"""Generic JSONL loading with a field mapping, and the benchmark registry."""

import json

import pytest

from obliviate.benchmarks import (
    BENCHMARKS, MCQExample, QAExample, TextExample, benchmark_kind, get_benchmark, load_jsonl, parse_mapping,
)
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
    with pytest.raises(DataError, match="^mine.jsonl line 1: missing field 'wrong' \\(mapped to 'perturbed_answers'\\)"):
        load_jsonl(f, "qa", {"question": "prompt", "answer": "target", "perturbed_answers": "wrong"})


def test_qa_missing_mapped_field(tmp_path):
    f = write_jsonl(tmp_path / "mine.jsonl", [{"prompt": "Who?", "target": "Me."}, {"prompt": "Why?"}])
    with pytest.raises(DataError, match="^mine.jsonl line 2: missing field 'target' \\(mapped to 'answer'\\)"):
        load_jsonl(f, "qa", {"question": "prompt", "answer": "target"})
    with pytest.raises(DataError, match="^mine.jsonl line 1: missing field 'question'"):
        load_jsonl(f, "qa")  # no mapping: schema names


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
