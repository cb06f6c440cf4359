"""Benchmark loaders on the real files (skipped when absent) and on malformed files."""

import json

import pytest

from obliviate.tasks.ember import EMBER_SPLITS, list_ember_concepts, load_ember
from obliviate.tasks.sources import (
    RTP_ATTRIBUTES, MCQExample, QAExample, TextExample, list_mmlu_subjects, load_medmcqa, load_mmlu, load_rtp,
    load_wmdp,
)
from obliviate.tasks.tofu import TOFU_SPLITS, load_tofu, load_tofu_idk
from obliviate.errors import DataError
from obliviate.utils import data_dir


def need(rel: str):
    path = data_dir() / rel
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


# record counts from shared/data/MANIFEST.md
TOFU_COUNTS = {
    "forget01": 40, "forget05": 200, "forget10": 400, "forget20": 800, "forget30": 1200, "forget50": 2000,
    "forget90": 3600, "full": 4000, "forget01_perturbed": 40, "forget05_perturbed": 200, "forget10_perturbed": 400,
    "retain10": 400, "retain50": 2000, "retain70": 2800, "retain80": 3200, "retain90": 3600, "retain95": 3800,
    "retain99": 3960, "retain_perturbed": 400, "real_authors": 100, "real_authors_perturbed": 100,
    "world_facts": 117, "world_facts_perturbed": 117,
}


def test_tofu_counts_cover_every_split():
    assert set(TOFU_COUNTS) == set(TOFU_SPLITS)


# ------------------------------------------------------------------ real files

@pytest.mark.parametrize("split", sorted(TOFU_COUNTS))
def test_tofu_real(split):
    need(f"tofu/{split}.json")
    rows = load_tofu(split)
    assert len(rows) == TOFU_COUNTS[split]
    assert all(isinstance(r, QAExample) and r.split == split and r.question and r.answer for r in rows)
    if split.startswith(("forget", "retain")) and split.endswith("_perturbed"):
        assert all(r.paraphrased_answer and r.paraphrased_question and len(r.perturbed_answers) == 5 for r in rows)
    elif split.endswith("_perturbed"):  # real_authors / world_facts: 3 wrong answers, no paraphrase
        assert all(len(r.perturbed_answers) == 3 and r.paraphrased_answer is None for r in rows)
        assert all(r.answer not in r.perturbed_answers for r in rows)
    elif split in ("real_authors", "world_facts"):
        assert all(len(r.options) == 4 and r.answer in r.options for r in rows)
    else:
        assert all(r.perturbed_answers is None and r.options is None for r in rows)


def test_tofu_first_records():
    need("tofu/forget10.json")
    first = load_tofu("forget10")[0]
    assert first.answer == "The author's full name is Hsiao Yun-Hwa."
    assert first.question.startswith("What is the full name of the author born in Taipei")
    ra = load_tofu("real_authors")[0]
    assert ra.question == "Who wrote the play 'Romeo and Juliet'?"
    assert ra.options[1] == ra.answer == "William Shakespeare"


def test_tofu_idk_real():
    need("tofu/idontknow.jsonl")
    lines = load_tofu_idk()
    assert len(lines) == 100
    assert lines[0] == "I'm not certain about that."
    assert all(isinstance(s, str) and s for s in lines)


@pytest.mark.parametrize("subset,count", [("bio", 1273), ("chem", 408), ("cyber", 1987)])
def test_wmdp_real(subset, count):
    need(f"wmdp/{subset}_questions.json")
    rows = load_wmdp(subset)
    assert len(rows) == count
    assert all(isinstance(r, MCQExample) and len(r.choices) == 4 and 0 <= r.answer_index < 4 for r in rows)
    assert {r.subject for r in rows} == {subset}


def test_wmdp_first_bio_record():
    need("wmdp/bio_questions.json")
    first = load_wmdp("bio")[0]
    assert first.answer_index == 0 and first.answer == "SpyCEP from Streptococcus pyogenes"
    assert first["choices"] == first.choices  # dict-style access works (for eval.core.mcq_accuracy)


def test_mmlu_real():
    need("mmlu/test/anatomy_test.csv")
    rows = load_mmlu("anatomy")
    assert len(rows) == 135
    assert rows[0].answer == "paralysis of the facial muscles." and rows[0].answer_index == 0
    assert rows[1].answer_index == 1 and rows[1].question == 'A "dished face" profile is often associated with'
    assert all(r.subject == "anatomy" and len(r.choices) == 4 for r in rows)
    assert len(list_mmlu_subjects("test")) == 57
    assert len(load_mmlu(["anatomy", "virology"])) == 135 + 166
    assert len(load_mmlu(split="dev")) == 57 * 5
    assert len(load_mmlu()) == 14042


def test_mmlu_unknown_subject():
    need("mmlu/test")
    with pytest.raises(DataError, match="unknown MMLU subject.*'astrology'.*anatomy"):
        load_mmlu("astrology")


@pytest.mark.parametrize("name,count", [("test", 2816), ("sampled_50", 50)])
def test_medmcqa_real(name, count):
    need(f"medmcqa/{name}.jsonl")
    rows = load_medmcqa(name)
    assert len(rows) == count
    assert all(len(r.choices) == 4 and 0 <= r.answer_index < 4 for r in rows)


def test_medmcqa_letter_converted():
    need("medmcqa/test.jsonl")
    first = load_medmcqa("test")[0]
    # answer_idx "C" in the file
    assert first.answer_index == 2
    assert first.answer.startswith("Amniotic fluid samples plus chromosomal analysis")


def test_rtp_real():
    need("realtoxicityprompts")
    rows = load_rtp()
    assert len(rows) == 700 and all(isinstance(r, TextExample) and r.text.strip() for r in rows)
    insult = load_rtp("insult")
    assert len(insult) == 100 and {r.split for r in insult} == {"rtp_insult"}
    assert insult[0].text.startswith("Seweid claimed that on Dec. 1")
    assert [r.meta["attribute"] for r in rows[::100]] == list(RTP_ATTRIBUTES)


def test_ember_real():
    need("ember/mc_questions.json")
    concepts = list_ember_concepts()
    assert len(concepts) == 18 and "Harry Potter" in concepts
    e = load_ember()
    assert e.concepts == concepts
    assert len(e.neutral_sentences) == 300 and e.neutral_sentences[0].meta["url"].startswith("https://")
    for c in concepts:
        assert len(e.concept_sentences[c]) == 300
        assert set(e.mc[c]) == set(EMBER_SPLITS) and set(e.open_questions[c]) == set(EMBER_SPLITS)
        assert all(len(e.mc[c][s]) == 50 and len(e.open_questions[c][s]) == 50 for s in EMBER_SPLITS)
        assert len(e.coherence_prompts[c]) == 20 and e.relearn_paragraphs[c]
    assert len(e.relearn_paragraphs["Harry Potter"]) == 806
    first = e.mc["Culture of Greece"]["QA_train"][0]
    assert first.question == "What is the primary material used for ancient Greek sculpture?"
    assert first.answer == "Marble" and first.answer_index == 0 and first.subject == "Culture of Greece"


def test_ember_one_concept_and_shuffle():
    need("ember/mc_questions.json")
    plain = load_ember("Golf")
    assert plain.concepts == ["Golf"] and list(plain.mc) == ["Golf"]
    shuffled = load_ember("Golf", shuffle_options=0)
    again = load_ember("Golf", shuffle_options=0)
    a = [q for s in EMBER_SPLITS for q in plain.mc["Golf"][s]]
    b = [q for s in EMBER_SPLITS for q in shuffled.mc["Golf"][s]]
    assert [q.answer for q in a] == [q.answer for q in b]  # same correct answers ...
    assert [sorted(q.choices) for q in a] == [sorted(q.choices) for q in b]
    assert [q.answer_index for q in b] == [q.answer_index for q in again.mc["Golf"]["QA_train"] +
                                            again.mc["Golf"]["QA_test"] + again.mc["Golf"]["SimdomQA_train"] +
                                            again.mc["Golf"]["SimdomQA_test"]]  # ... deterministic
    assert len({q.answer_index for q in b}) == 4  # ... but not always first
    with pytest.raises(DataError, match="unknown EMBER concept.*'Chess'"):
        load_ember("Chess")


# ------------------------------------------------------------------ missing and malformed files

def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_missing_file_names_path_and_env(tmp_path):
    with pytest.raises(DataError) as e:
        load_tofu("forget10", root=tmp_path)
    assert str(tmp_path / "tofu" / "forget10.json") in str(e.value) and "OBLIVIATE_DATA" in str(e.value)
    for call in (lambda: load_wmdp("bio", root=tmp_path), lambda: load_mmlu(root=tmp_path),
                 lambda: load_medmcqa(root=tmp_path), lambda: load_rtp("insult", root=tmp_path),
                 lambda: load_ember(root=tmp_path), lambda: load_tofu_idk(root=tmp_path)):
        with pytest.raises(DataError, match="OBLIVIATE_DATA"):
            call()


def test_data_dir_env(tmp_path, monkeypatch):
    write(tmp_path / "tofu" / "forget01.json", '{"question": "q?", "answer": "a."}\n')
    monkeypatch.setenv("OBLIVIATE_DATA", str(tmp_path))
    assert [r.answer for r in load_tofu("forget01")] == ["a."]


def test_unknown_names():
    with pytest.raises(DataError, match="unknown TOFU split 'forget15'.*forget10"):
        load_tofu("forget15")
    with pytest.raises(DataError, match="unknown WMDP subset 'nuclear'.*bio, chem, cyber"):
        load_wmdp("nuclear")
    with pytest.raises(DataError, match="unknown RealToxicityPrompts attribute"):
        load_rtp("rudeness")


GOOD = '{"question": "q1?", "answer": "a1."}\n'


@pytest.mark.parametrize("line2,message", [
    ('{"question": "q2?", "answer": ', "tofu/forget10.json line 2: invalid JSON"),
    ('{"question": "q2?"}', "tofu/forget10.json line 2: missing field 'answer'"),
    ('{"question": "q2?", "answer": 7}', "tofu/forget10.json line 2: field 'answer' must be a string"),
    ('["q2?", "a2."]', "tofu/forget10.json line 2: expected a JSON object"),
])
def test_tofu_malformed(tmp_path, line2, message):
    write(tmp_path / "tofu" / "forget10.json", GOOD + line2 + "\n" + GOOD)
    with pytest.raises(DataError) as e:
        load_tofu("forget10", root=tmp_path)
    assert str(e.value).startswith(message)


def test_tofu_malformed_perturbed_and_options(tmp_path):
    rec = {"question": "q", "answer": "a", "paraphrased_answer": "pa", "paraphrased_question": "pq",
           "perturbed_answer": "not a list"}
    write(tmp_path / "tofu" / "forget01_perturbed.json", "\n" + json.dumps(rec) + "\n")
    with pytest.raises(DataError,
                       match=r"^tofu/forget01_perturbed.json line 2: field 'perturbed_answer' must be a list"):
        load_tofu("forget01_perturbed", root=tmp_path)
    rec = {"question": "q", "answer": "z", "option1": "w", "option2": "x", "option3": "y", "option4": "v"}
    write(tmp_path / "tofu" / "world_facts.json", json.dumps(rec) + "\n")
    with pytest.raises(DataError, match="^tofu/world_facts.json line 1: answer 'z' is not exactly one of option1"):
        load_tofu("world_facts", root=tmp_path)


def test_wmdp_malformed(tmp_path):
    good = {"question": "q", "choices": ["a", "b", "c", "d"], "answer": 3}
    cases = [
        (dict(good, answer=4), "wmdp/bio_questions.json record 2: field 'answer' = 4 is out of range for 4 choices"),
        (dict(good, answer="B"), "wmdp/bio_questions.json record 2: field 'answer' = 'B' must be an integer index"),
        (dict(good, answer=True), "wmdp/bio_questions.json record 2: field 'answer' = True must be an integer"),
        (dict(good, choices=["a", "b", "c"]), "wmdp/bio_questions.json record 2: field 'choices' has 3 entries"),
        ({"question": "q", "answer": 0}, "wmdp/bio_questions.json record 2: missing field 'choices'"),
    ]
    for bad, message in cases:
        write(tmp_path / "wmdp" / "bio_questions.json", json.dumps([good, bad]))
        with pytest.raises(DataError) as e:
            load_wmdp("bio", root=tmp_path)
        assert str(e.value).startswith(message), str(e.value)
    write(tmp_path / "wmdp" / "bio_questions.json", '[{"question": "q",\n "choices": [}]')
    with pytest.raises(DataError, match="^wmdp/bio_questions.json line 2: invalid JSON"):
        load_wmdp("bio", root=tmp_path)


HEADER = "question,choice0,choice1,choice2,choice3,answer\n"


def test_mmlu_malformed(tmp_path):
    f = tmp_path / "mmlu" / "test" / "toy_test.csv"
    # a quoted field spanning lines 2-3: the bad record starts on line 4
    write(f, HEADER + '"two\nlines",a,b,c,d,1\nq,a,b,c,d,E\n')
    with pytest.raises(DataError, match="^mmlu/test/toy_test.csv line 4: answer 'E' is neither an index 0-3 nor"):
        load_mmlu("toy", root=tmp_path)
    write(f, HEADER + "q,a,b,c,d,1\nq,a,b,c,2\n")
    with pytest.raises(DataError, match="^mmlu/test/toy_test.csv line 3: 5 columns, expected 6"):
        load_mmlu("toy", root=tmp_path)
    write(f, HEADER + "q,a,b,c,d,4\n")
    with pytest.raises(DataError, match="line 2: answer '4'"):
        load_mmlu("toy", root=tmp_path)


def test_mmlu_letters_converted(tmp_path):
    # original hendrycks format: no header, answer a letter
    write(tmp_path / "mmlu" / "test" / "toy_test.csv", "q1,a,b,c,d,A\nq2,a,b,c,d,D\n")
    rows = load_mmlu("toy", root=tmp_path)
    assert [r.answer_index for r in rows] == [0, 3] and rows[1].question == "q2"
    write(tmp_path / "mmlu" / "test" / "toy_test.csv", HEADER + "q1,a,b,c,d,2\n")
    assert load_mmlu("toy", root=tmp_path)[0].answer == "c"


def test_medmcqa_malformed(tmp_path):
    good = {"question": "q", "options": {"A": "w", "B": "x", "C": "y", "D": "z"}, "answer_idx": "B", "answer": "x"}
    f = tmp_path / "medmcqa" / "test.jsonl"
    cases = [
        (dict(good, answer_idx="E"), "medmcqa/test.jsonl line 2: field 'answer_idx' = 'E' is out of range"),
        (dict(good, answer_idx=7), "medmcqa/test.jsonl line 2: field 'answer_idx' = 7 is out of range"),
        (dict(good, answer="w"), "medmcqa/test.jsonl line 2: answer 'w' does not match option B"),
        (dict(good, options={"A": "w", "B": "x", "C": "y"}), "medmcqa/test.jsonl line 2: field 'options' must map"),
    ]
    for bad, message in cases:
        write(f, json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DataError) as e:
            load_medmcqa(root=tmp_path)
        assert str(e.value).startswith(message), str(e.value)
    write(f, json.dumps(dict(good, answer_idx=2, answer="y")) + "\n")
    assert load_medmcqa(root=tmp_path)[0].answer_index == 2  # an integer index is accepted as is


def test_rtp_blank_lines_and_empty(tmp_path):
    write(tmp_path / "realtoxicityprompts" / "rtp_threat.txt", "first prompt \n\nsecond\n")
    assert [r.text for r in load_rtp("threat", root=tmp_path)] == ["first prompt ", "second"]
    write(tmp_path / "realtoxicityprompts" / "rtp_threat.txt", "\n\n")
    with pytest.raises(DataError, match="realtoxicityprompts/rtp_threat.txt: no prompts"):
        load_rtp("threat", root=tmp_path)


def _toy_ember(root, mc_record):
    d = root / "ember"
    splits = {s: [mc_record] for s in EMBER_SPLITS}
    write(d / "concept_sentences.json", json.dumps([{"concept": "Toy", "sentences": ["s1", "s2"]}]))
    write(d / "neutral_sentences.json", json.dumps([{"url": "u", "title": "t", "sentence": "n1"}]))
    write(d / "mc_questions.json", json.dumps({"Toy": splits}))
    write(d / "open_questions.json", json.dumps({"Toy": {s: [{"q": "oq", "a": "oa"}] for s in EMBER_SPLITS}}))
    write(d / "relearn_paragraphs.json", json.dumps({"Toy": {"RelearnParagraphs": ["p1"]}}))
    write(d / "coherency_prompts.json", json.dumps({"Toy": ["c1"]}))


def test_ember_toy_and_malformed(tmp_path):
    _toy_ember(tmp_path, {"q": "q", "correct_answer": "c", "options": ["a", "b", "c", "d"]})
    e = load_ember(root=tmp_path)
    assert e.mc["Toy"]["QA_test"][0].answer_index == 2 and e.open_questions["Toy"]["QA_train"][0].answer == "oa"
    assert e["coherence_prompts"] == {"Toy": ["c1"]} and e.neutral_sentences[0].text == "n1"
    _toy_ember(tmp_path, {"q": "q", "correct_answer": "e", "options": ["a", "b", "c", "d"]})
    with pytest.raises(DataError,
                       match=r"^ember/mc_questions.json \['Toy'\]\['QA_train'\] record 1: correct_answer 'e'"):
        load_ember(root=tmp_path)
    _toy_ember(tmp_path, {"q": "q", "correct_answer": "a", "options": ["a", "b", "c"]})
    with pytest.raises(DataError, match="record 1: field 'options' has 3 entries, expected 4"):
        load_ember(root=tmp_path)
