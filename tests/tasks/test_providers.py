"""The tofu, ember, wmdp and muse task providers: sizes, roles, kinds, chance levels and errors.

TOFU and EMBER are built from the real data directory (skipped when absent) and from tiny
files written here; WMDP and MUSE only from tiny files in their documented layouts.
No model is trained or scored here.
"""


import pytest

from obliviate.errors import ConfigError, DataError
from obliviate.tasks import TASKS, Task, check_task_spec, load_task, task_names
from obliviate.tasks.ember import EMBER_CONCEPTS, EMBER_SLUGS, concept_slug, list_ember_concepts, load_ember
from obliviate.tasks.muse import split_documents
from obliviate.tasks.tofu import tofu_answer, tofu_prompt
from obliviate.tasks.wmdp import MMLU_PER_SUBJECT
from obliviate.utils import data_dir
from _userdata import write_json, write_jsonl

PROVIDERS = {"tofu": ["forget01", "forget05", "forget10"], "ember": list(EMBER_SLUGS), "wmdp": ["bio", "cyber"],
             "muse": ["news", "books"]}


def need(rel: str):
    path = data_dir() / rel
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def one_line(err) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


def roles(task: Task) -> dict:
    return {e.name: (e.role, e.kind) for e in task.evals}


# ------------------------------------------------------------------ registry and arguments

def test_providers_registered_with_their_arguments():
    names = task_names()
    for name, valid in PROVIDERS.items():
        assert name in names
        prov = TASKS[name]
        assert prov.needs_argument
        assert prov.arguments() == valid  # no data is read to list them


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_missing_argument_lists_the_valid_ones(name):
    with pytest.raises(ConfigError) as err:
        check_task_spec(name)
    msg = one_line(err)
    assert all(v in msg for v in PROVIDERS[name])


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_unknown_argument_is_one_line_naming_it(name, tmp_path):
    with pytest.raises(ConfigError) as err:
        load_task(f"{name}:nonesuch", root=tmp_path)
    msg = one_line(err)
    assert "'nonesuch'" in msg
    assert all(v in msg for v in PROVIDERS[name])


def test_ember_slugs_of_the_released_names():
    assert len(set(EMBER_SLUGS)) == 18
    assert concept_slug("Harry Potter") == "harry_potter"
    assert concept_slug("Valentine's Day") == "valentines_day"
    assert concept_slug("COVID-19 pandemic") == "covid_19_pandemic"
    assert concept_slug(" world-war II ") == "world_war_ii"


# ------------------------------------------------------------------ TOFU, real data

def test_tofu_real_limit():
    need("tofu/forget10.json")
    task = load_task("tofu:forget10", limit=5, seed=3, unknown_option=True)
    assert task.name == "tofu:forget10"
    assert len(task.forget.qa) == 5 and len(task.retain.qa) == 5 and not task.forget.docs
    assert roles(task) == {"forget_qa": ("forget", "qa"), "retain_qa": ("retain", "qa"),
                           "real_authors_qa": ("utility", "qa"), "world_facts_qa": ("utility", "qa"),
                           "real_authors_mcq": ("utility", "mcq"), "world_facts_mcq": ("utility", "mcq")}
    for e in task.evals:
        assert len(e.items) == 5
        assert e.chance == (0.25 if e.kind == "mcq" else 0.0)
        if e.kind == "mcq":
            assert e.mcq_style == "cloze"
            assert all(len(m.choices) == 4 and m.choices[m.answer_index] == m.answer for m in e.items)
    # the forget eval set is the forget split's perturbed file, question for question
    assert [ex.question for ex in task.evals[0].items] == [q for q, _ in task.forget.qa]
    assert all(ex.paraphrased_answer and ex.perturbed_answers for ex in task.evals[0].items)
    # meta["perturbed"] holds what tofu_eval needs, under its argument names
    assert set(task.meta["perturbed"]) == {"forget", "retain", "real_authors", "world_facts"}
    assert task.meta["perturbed"]["forget"] is task.evals[0].items
    assert task.meta["retain_split"] == "retain90" and task.meta["retain_derived"] is False
    # the prompt reproduces eval.tofu's format exactly
    q, a = task.forget.qa[0]
    assert task.prompt.pairs([(q, a)]) == [(tofu_prompt(q), tofu_answer(a))]
    assert task.idk and all(isinstance(s, str) and s for s in task.idk)
    assert task.relearn is None and task.holdout is None  # no holdout file in the shared data
    assert task.forget_halves() is not None
    assert task.oracle_data is task.retain


@pytest.mark.parametrize("split,n_forget", [("forget01", 40), ("forget10", 400)])
def test_tofu_real_forget_and_retain_are_disjoint(split, n_forget):
    need(f"tofu/{split}.json")
    task = load_task(f"tofu:{split}")
    forget_q = {q for q, _ in task.forget.qa}
    retain_q = {q for q, _ in task.retain.qa}
    assert len(task.forget.qa) == n_forget and len(task.retain.qa) == 4000 - n_forget
    assert not forget_q & retain_q
    assert not {ex.question for ex in task.meta["perturbed"]["retain"]} & forget_q


# ------------------------------------------------------------------ TOFU, tiny files

def _qa(i, prefix):
    return {"question": f"{prefix} question {i}?", "answer": f"{prefix} answer {i}."}


def _perturbed(i, prefix):
    return {**_qa(i, prefix), "paraphrased_question": f"{prefix} q {i} rephrased?",
            "paraphrased_answer": f"{prefix} a {i} rephrased.", "perturbed_answer": [f"wrong {i}a", f"wrong {i}b"]}


@pytest.fixture
def tiny_tofu(tmp_path):
    """forget01 (2 QA) + full (6 QA) and the eval files; no retain99, no idontknow, a holdout01."""
    d = tmp_path / "tofu"
    forget = [_qa(i, "author") for i in range(2)]
    write_jsonl(d / "forget01.json", forget)
    write_jsonl(d / "full.json", forget + [_qa(i, "other") for i in range(4)])
    write_jsonl(d / "forget01_perturbed.json", [_perturbed(i, "author") for i in range(2)])
    write_jsonl(d / "retain_perturbed.json", [_perturbed(i, "other") for i in range(3)])
    write_jsonl(d / "holdout01.json", [_qa(i, "unseen") for i in range(2)])
    for s in ("real_authors", "world_facts"):
        rows = [{"question": f"{s} {i}?", "answer": "B", "option1": "A", "option2": "B", "option3": "C",
                 "option4": "D"} for i in range(3)]
        write_jsonl(d / f"{s}.json", rows)
        write_jsonl(d / f"{s}_perturbed.json",
                    [{"question": r["question"], "answer": "B", "perturbed_answer": ["A", "C", "D"]} for r in rows])
    return tmp_path


def test_tofu_retain_derived_from_full_and_local_holdout(tiny_tofu):
    task = load_task("tofu:forget01", root=tiny_tofu)
    assert task.meta["retain_derived"] is True
    assert [q for q, _ in task.retain.qa] == [f"other question {i}?" for i in range(4)]
    assert not {q for q, _ in task.forget.qa} & {q for q, _ in task.retain.qa}
    assert task.holdout.qa == [(f"unseen question {i}?", f"unseen answer {i}.") for i in range(2)]
    assert task.meta["holdout_split"] == "holdout01"
    assert task.idk is None  # no idontknow.jsonl: the run's default refusals
    mcq = {e.name: e for e in task.evals}["real_authors_mcq"]
    assert [m.answer_index for m in mcq.items] == [1, 1, 1] and mcq.chance == 0.25


def test_tofu_missing_files_name_them(tiny_tofu, tmp_path_factory):
    (tiny_tofu / "tofu" / "full.json").unlink()
    with pytest.raises(DataError) as err:
        load_task("tofu:forget01", root=tiny_tofu)
    msg = one_line(err)
    assert "retain99.json" in msg and "full.json" in msg and "allow_hub" in msg
    with pytest.raises(DataError) as err:
        load_task("tofu:forget05", root=tmp_path_factory.mktemp("empty"))
    msg = one_line(err)
    assert "forget05.json" in msg and "OBLIVIATE_DATA" in msg


# ------------------------------------------------------------------ EMBER, real data

def test_ember_real_limit():
    need("ember/mc_questions.json")
    task = load_task("ember:harry_potter", limit=5, extra=1)
    assert task.name == "ember:harry_potter" and task.meta["concept"] == "Harry Potter"
    assert len(task.forget.docs) == 5 and len(task.retain.docs) == 5 and not task.forget.qa
    assert roles(task) == {"forget_mcq": ("forget", "mcq"), "simdom_mcq": ("neighbour", "mcq"),
                           "forget_qa": ("forget", "qa"), "forget_text": ("forget", "text"),
                           "retain_text": ("retain", "text")}
    for e in task.evals:
        assert len(e.items) == 5
        assert e.chance == {"mcq": 0.25, "qa": 0.0, "text": None}[e.kind]
    assert len(task.relearn) == 5 and len(task.meta["coherence_prompts"]) == 5


def test_ember_real_names_and_seeded_split():
    need("ember/mc_questions.json")
    assert list(list_ember_concepts()) == list(EMBER_CONCEPTS)
    task = load_task("ember:Harry Potter", seed=0)
    assert load_task("ember:HARRY-POTTER", seed=0).forget.docs == task.forget.docs
    assert load_task("ember:valentines_day").meta["concept"] == "Valentine's Day"
    raw = load_ember("Harry Potter")
    sentences = raw.concept_sentences["Harry Potter"]
    evals = {e.name: e for e in task.evals}
    held_out = [t.text for t in evals["forget_text"].items]
    assert (len(task.forget.docs), len(held_out)) == (240, 60)
    assert sorted(task.forget.docs + held_out) == sorted(sentences)
    neutral = [t.text for t in raw.neutral_sentences]
    retain_eval = [t.text for t in evals["retain_text"].items]
    assert (len(task.retain.docs), len(retain_eval)) == (240, 60)
    assert sorted(task.retain.docs + retain_eval) == sorted(neutral)
    assert load_task("ember:harry_potter", seed=1).forget.docs != task.forget.docs
    assert len(task.relearn) == len(raw.relearn_paragraphs["Harry Potter"])


def test_ember_real_options_are_shuffled():
    """The released options put the correct one first ~89% of the time; the task's do not."""
    need("ember/mc_questions.json")
    raw = load_ember("Harry Potter")
    first_raw = [m.answer_index == 0 for s in ("QA_test", "SimdomQA_test") for m in raw.mc["Harry Potter"][s]]
    task = load_task("ember:harry_potter", seed=0)
    mcqs = [m for e in task.evals if e.kind == "mcq" for m in e.items]
    first = [m.answer_index == 0 for m in mcqs]
    assert sum(first_raw) / len(first_raw) > 0.7
    assert sum(first) / len(first) < 0.5
    assert all(m.choices[m.answer_index] == r.answer for m, r in
               zip(mcqs, raw.mc["Harry Potter"]["QA_test"] + raw.mc["Harry Potter"]["SimdomQA_test"]))


def test_ember_missing_files(tmp_path):
    with pytest.raises(DataError) as err:
        load_task("ember:golf", root=tmp_path)
    msg = one_line(err)
    assert "ember" in msg and ".json" in msg and "OBLIVIATE_DATA" in msg


# ------------------------------------------------------------------ WMDP, tiny files

def test_wmdp_bio_tiny(tiny_wmdp):
    task = load_task("wmdp:bio", root=tiny_wmdp, seed=5, whatever="ignored")
    assert task.name == "wmdp:bio"
    assert task.forget.docs == [f"bio forget document {i}." for i in range(7)] and not task.forget.qa
    assert task.retain.docs == [f"bio retain document {i}." for i in range(7)]
    assert roles(task) == {"wmdp_bio": ("forget", "mcq"), "mmlu_neighbour": ("neighbour", "mcq"),
                           "mmlu": ("utility", "mcq")}
    evals = {e.name: e for e in task.evals}
    assert all(e.chance == 0.25 and e.mcq_style == "letters" for e in task.evals)
    assert [m.answer_index for m in evals["wmdp_bio"].items] == [0, 1, 2, 3, 0, 1]
    assert len(evals["wmdp_bio"].items) == 6
    # neighbour: both subjects in full, interleaved
    assert [m.subject for m in evals["mmlu_neighbour"].items] == \
        ["college_biology", "virology", "college_biology", "virology", "college_biology"]
    # utility: every other subject, at most MMLU_PER_SUBJECT each, interleaved
    util = [m.subject for m in evals["mmlu"].items]
    assert set(util) == {"anatomy", "astronomy", "college_computer_science", "computer_security"}
    assert util.count("anatomy") == MMLU_PER_SUBJECT and util.count("astronomy") == 4
    assert util[:4] == ["anatomy", "astronomy", "college_computer_science", "computer_security"]
    assert task.relearn is None and task.holdout is None


def test_wmdp_limit_cuts_every_set(tiny_wmdp):
    task = load_task("wmdp:bio", root=tiny_wmdp, limit=3)
    assert len(task.forget.docs) == 3 and len(task.retain.docs) == 3
    assert all(len(e.items) == 3 for e in task.evals)
    assert len({m.subject for m in task.evals_by_role("utility")[0].items}) == 3  # interleaved subjects


def test_wmdp_missing_corpora(tiny_wmdp):
    (tiny_wmdp / "wmdp" / "bio-forget-corpus.jsonl").unlink()
    with pytest.raises(DataError) as err:
        load_task("wmdp:bio", root=tiny_wmdp, allow_hub=True)  # not on the hub either: no hub call is made
    msg = one_line(err)
    assert "bio-forget-corpus.jsonl" in msg and "gated" in msg
    with pytest.raises(DataError) as err:
        load_task("wmdp:cyber", root=tiny_wmdp)
    msg = one_line(err)
    assert "cyber-forget-corpus.jsonl" in msg and "allow_hub" in msg and "cais/wmdp-corpora" in msg


def test_wmdp_corpus_record_without_text(tiny_wmdp):
    write_jsonl(tiny_wmdp / "wmdp" / "bio-retain-corpus.jsonl", [{"text": "ok"}, {"body": "no text"}])
    with pytest.raises(DataError) as err:
        load_task("wmdp:bio", root=tiny_wmdp)
    assert "bio-retain-corpus.jsonl line 2" in one_line(err) and "'text'" in str(err.value)


# ------------------------------------------------------------------ MUSE, tiny files

def test_split_documents():
    assert split_documents("a\nb\n\n c \n \n\n\nd\n") == ["a\nb", "c", "d"]
    assert split_documents("\n\n") == []


def test_muse_news_tiny(tiny_muse):
    task = load_task("muse:news", root=tiny_muse, seed=1, extra=True)
    assert task.name == "muse:news"
    assert task.forget.docs == ["Forget article one.\nStill one.", "Forget article two.", "Forget article three."]
    assert task.retain.docs == ["Retain one.", "Retain two."] and task.meta["retain_split"] == "retain1"
    assert task.holdout.docs == ["Holdout one.", "Holdout two.", "Holdout three."]
    assert roles(task) == {"knowmem_forget": ("forget", "qa"), "knowmem_retain": ("retain", "qa"),
                           "verbmem_forget": ("forget", "text")}
    evals = {e.name: e for e in task.evals}
    assert [(ex.question, ex.answer) for ex in evals["knowmem_forget"].items] == \
        [(f"Forget q{i}?", f"fa{i}") for i in range(4)]
    assert len(evals["knowmem_retain"].items) == 3 and evals["knowmem_retain"].chance == 0.0
    verb = evals["verbmem_forget"]
    assert verb.chance is None
    assert [(t.meta["prompt"], t.text) for t in verb.items] == [(f"Once {i}", f" upon a time {i}.") for i in range(2)]
    assert task.meta["verbmem"] == [{"prompt": f"Once {i}", "gt": f" upon a time {i}."} for i in range(2)]
    assert task.relearn is None


def test_muse_limit_and_retain2_fallback(tiny_muse):
    raw = tiny_muse / "muse" / "news" / "raw"
    (raw / "retain1.txt").rename(raw / "retain2.txt")
    task = load_task("muse:news", root=tiny_muse, limit=1)
    assert task.meta["retain_split"] == "retain2"
    assert len(task.forget.docs) == len(task.retain.docs) == len(task.holdout.docs) == 1
    assert all(len(e.items) == 1 for e in task.evals) and len(task.meta["verbmem"]) == 1


def test_muse_missing_files_name_the_layout(tiny_muse):
    with pytest.raises(DataError) as err:
        load_task("muse:books", root=tiny_muse)
    msg = one_line(err)
    assert "muse/books/raw/forget.txt" in msg and "knowmem/forget_qa.json" in msg and "verbmem/forget.json" in msg
    assert "muse-bench/MUSE-Books" in msg
    (tiny_muse / "muse" / "news" / "verbmem" / "forget.json").unlink()  # a part missing: the others still computed
    task = load_task("muse:news", root=tiny_muse)  # (issue #42; tests/tasks/test_muse_missing_parts.py)
    assert "verbmem_forget" not in [e.name for e in task.evals] and "knowmem_forget" in [e.name for e in task.evals]
    assert any("verbmem/forget.json" in x for x in task.meta["missing"])


def test_muse_malformed_knowmem(tiny_muse):
    write_json(tiny_muse / "muse" / "news" / "knowmem" / "forget_qa.json", [{"question": "q?"}])
    with pytest.raises(DataError) as err:
        load_task("muse:news", root=tiny_muse)
    assert "forget_qa.json record 1" in one_line(err) and "'answer'" in str(err.value)


# ------------------------------------------------------------------ benchmark, tiny files

def test_benchmark_task_is_one_evaluation_set(tiny_wmdp):
    task = load_task("benchmark:wmdp_bio", root=tiny_wmdp, limit=5)
    assert task.name == "benchmark:wmdp_bio" and roles(task) == {"wmdp_bio": ("forget", "mcq")}
    (es,) = task.evals
    assert es.mcq_style == "letters" and es.chance == pytest.approx(0.25) and len(es.items) == 5
    pairs = [(m["question"], m["choices"][m["answer_index"]]) for m in es.items]
    assert task.forget.qa == pairs[0::2] and task.retain.qa == pairs[1::2]  # alternately forget, retain
    mmlu = load_task("benchmark:mmlu:anatomy", root=tiny_wmdp, limit=3)
    assert roles(mmlu) == {"mmlu_anatomy": ("utility", "mcq")} and len(mmlu.evals[0].items) == 3
    with pytest.raises(DataError, match="unknown benchmark 'nope'"):
        load_task("benchmark:nope", root=tiny_wmdp)
    with pytest.raises(ConfigError, match="toxicity"):
        load_task("benchmark:rtp", root=tiny_wmdp)
    with pytest.raises(ConfigError, match="needs an argument"):
        check_task_spec("benchmark")
