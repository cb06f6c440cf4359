import re
from collections import Counter

from obliviate.world import chance, tiles
from obliviate.world.generate import DOMAIN_RELATIONS

POOL_OF = {r.name: r.pool for relations in DOMAIN_RELATIONS.values() for r in relations}

RELATIONS_PER_ENTITY = 3


def _invented_words(world):
    """Every invented word: entity name words, invented pool values, the saga title word."""
    words = set()
    for e in world.entities:
        words.update(e["name"].split())
    for name in ("drug", "region", "town", "artifact", "saga_place", "faction"):
        words.update(world.pools[name])
    words.update(world.concept["exclusive_terms"])
    return sorted(words)


def test_split_sizes(world):
    cfg = world.config
    sizes = {"forget": cfg.n_forget, "holdout": cfg.n_holdout, "retain": cfg.n_retain,
             "general": cfg.n_general, "concept": cfg.n_concept}
    for split, n in sizes.items():
        assert len(world.facts_by_split(split)) == RELATIONS_PER_ENTITY * n
    assert len({f["id"] for f in world.facts}) == len(world.facts)


def test_names_unique_and_never_inside_one_another(world):
    words = [w.lower() for w in _invented_words(world)]
    assert len(set(words)) == len(words)
    for a in words:
        for b in words:
            assert a == b or a not in b, (a, b)
    names = [e["name"] for e in world.entities]
    assert len(set(names)) == len(names)


def test_answer_spans_tile_and_mark_value(world):
    # canonical answers refer to the entity by pronoun ("It is treated with X."), so that a tiny
    # model answers from memory of the value rather than by copying a name from the question
    for f in world.facts:
        spans = f["answer_spans"]
        assert tiles(f["answer"], spans), f["id"]
        specific = [f["answer"][s:e].strip() for s, e, kind in spans if kind == "specific"]
        structural = "".join(f["answer"][s:e] for s, e, kind in spans if kind == "structural")
        assert specific == [f["value"]], f["id"]
        assert f["value"] not in structural and f["entity"] not in structural
        for s, e, _ in spans[1:]:
            assert not f["answer"][s:e][-1].isspace()  # whitespace only ever leads a span
        assert {kind for _, _, kind in spans} <= {"specific", "structural"}


def test_answers_are_short_sentences(world):
    for f in world.facts:
        for text in [f["answer"], f["answer_paraphrase"], *f["perturbed_answers"]]:
            assert text[0].isupper() and text.endswith("."), text
        assert len(f["answer"].split()) <= 8, f["answer"]
        assert f["question"].endswith("?") and f["question_paraphrase"].endswith("?")
        assert f["question"] != f["question_paraphrase"]
        assert f["answer"] != f["answer_paraphrase"] and f["value"] in f["answer_paraphrase"]
        assert f["entity"] in f["question"] and f["entity"] in f["question_paraphrase"]


def test_questions_identify_their_fact(world):
    counts = Counter(f["question"] for f in world.facts)
    assert max(counts.values()) == 1


def test_perturbed_answers(world):
    for f in world.facts:
        wrong = f["perturbed_answers"]
        assert len(wrong) >= 3
        assert len(set(wrong)) == len(wrong)
        assert f["answer"] not in wrong
        pool = world.pools[POOL_OF[f["relation"]]]
        start, end = _value_span(f)
        for text in wrong:
            # same template, another value of the same pool
            values = [v for v in pool if text == f["answer"][:start] + v + f["answer"][end:]]
            assert len(values) == 1 and values[0] != f["value"], text


def _value_span(fact):
    for s, e, kind in fact["answer_spans"]:
        text = fact["answer"][s:e]
        if kind == "specific" and text.strip() == fact["value"]:
            return e - len(fact["value"]), e
    raise AssertionError(fact["id"])


def test_mcqs(world):
    mcqs = world.mcqs()
    assert [m["fact_id"] for m in mcqs] == [f["id"] for f in world.facts]
    by_id = {f["id"]: f for f in world.facts}
    for m in mcqs:
        f = by_id[m["fact_id"]]
        assert len(m["choices"]) == chance.N_CHOICES == len(set(m["choices"]))
        assert [c == f["value"] for c in m["choices"]].count(True) == 1
        assert m["choices"][m["answer_index"]] == f["value"]
        assert set(m["choices"]) <= set(world.pools[POOL_OF[f["relation"]]])
        assert (m["question"], m["split"], m["domain"]) == (f["question"], f["split"], f["domain"])
    assert world.mcqs(domain="biology") == [m for m in mcqs if m["domain"] == "biology"]
    assert world.mcqs(split="retain", domain="medicine") == []


def test_mcq_answer_positions_are_spread(default_world):
    positions = Counter(m["answer_index"] for m in default_world.mcqs())
    assert set(positions) == {0, 1, 2, 3}
    assert max(positions.values()) < 0.4 * sum(positions.values())


def test_values_are_shared_between_entities(default_world):
    by_relation = {}
    for f in default_world.facts:
        if f["split"] != "holdout":
            by_relation.setdefault(f["relation"], []).append(f["value"])
    for relation, values in by_relation.items():
        assert max(Counter(values).values()) >= 2, relation
        assert len(set(values)) >= 4, relation


def test_qa_view(world):
    for split in ("forget", "retain"):
        qa = world.qa(split)
        facts = world.facts_by_split(split)
        assert [q["fact_id"] for q in qa] == [f["id"] for f in facts]
        assert all(q["answer"] == f["answer"] and q["question"] == f["question"] for q, f in zip(qa, facts))
    assert len(world.qa()) == len(world.facts)


def test_open_questions_cover_every_entity(world):
    oq = world.open_questions
    assert [q["entity"] for q in oq] == [e["name"] for e in world.entities]
    answers = {}
    for f in world.facts:
        answers.setdefault(f["entity"], []).append(f["answer"])
    for q in oq:
        assert q["entity"] in q["question"]
        assert all(a in q["reference"] for a in answers[q["entity"]])
        assert set(q) >= {"domain", "split", "question", "reference"}


def test_no_template_leaves_a_placeholder(world):
    for f in world.facts:
        for text in (f["question"], f["question_paraphrase"], f["answer"], f["answer_paraphrase"]):
            assert not re.search(r"[{}]", text), text
