import os
import re
from collections import Counter

from _worldsizes import n_lookalikes
from obliviate.world import chance, tiles
from obliviate.world.generate import DOMAIN_RELATIONS, NEIGHBOUR_RELATIONS, PRACTICE_SPLITS

POOL_OF = {r.name: r.pool for relations in [*DOMAIN_RELATIONS.values(), *NEIGHBOUR_RELATIONS.values()]
           for r in relations}

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
    n_lookalike = n_lookalikes(cfg)
    n_diseases = cfg.n_forget + cfg.n_holdout
    neighbour = world.facts_by_split("neighbour")
    assert len(neighbour) == len(NEIGHBOUR_RELATIONS["medicine"]) * n_diseases + RELATIONS_PER_ENTITY * n_lookalike
    assert Counter(f["neighbour"] for f in neighbour) == Counter(
        {"attribute": n_diseases * len(NEIGHBOUR_RELATIONS["medicine"]), "lookalike": 3 * n_lookalike})
    near_forget = [f for f in neighbour if f["near"] == "forget"]
    assert len(near_forget) == cfg.n_forget + RELATIONS_PER_ENTITY * min(cfg.n_lookalike, cfg.n_forget)
    assert all("neighbour" not in f for f in world.facts if f["split"] != "neighbour")
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
        questions = [f["question"], *f["train_questions"], *f["question_paraphrases"]]
        assert all(q.endswith("?") and f["entity"] in q for q in questions), questions
        assert len(set(questions)) == len(questions) and len(f["train_questions"]) >= 2
        assert f["question_paraphrase"] in f["question_paraphrases"] and len(f["question_paraphrases"]) >= 2
        assert f["answer"] != f["answer_paraphrase"] and f["value"] in f["answer_paraphrase"]
        for text in [*f["statements"], f["probe_statement"]]:
            assert f["entity"] in text and f["value"] in text and text.endswith("."), text
        assert f["probe_statement"] not in f["statements"]


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


def _pool_of(world, relation):
    from obliviate.world.generate import DOMAIN_RELATIONS, NEIGHBOUR_RELATIONS

    rels = [r for group in (*DOMAIN_RELATIONS.values(), *NEIGHBOUR_RELATIONS.values()) for r in group]
    return next(r.pool for r in rels if r.name == relation)


def test_values_are_shared_between_entities(default_world):
    by_relation = {}
    for f in default_world.facts:
        if f["split"] != "holdout":
            by_relation.setdefault(f["relation"], []).append(f["value"])
    for relation, values in by_relation.items():
        pool = default_world.pools[_pool_of(default_world, relation)]
        if len(values) > len(pool):  # more entities than values: some value is shared
            assert max(Counter(values).values()) >= 2, relation
        assert len(set(values)) >= min(4, len(values)), relation


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


def test_held_out_questions_take_turns(default_world):
    # the facts of one relation are asked in every held-out wording, not always the first
    for relation in POOL_OF:
        wordings = Counter(f["question_paraphrases"].index(f["question_paraphrase"])
                           for f in default_world.facts if f["relation"] == relation)
        assert len(wordings) >= 2, relation


def test_no_template_leaves_a_placeholder(world):
    for f in world.facts:
        for text in (f["question"], f["question_paraphrase"], f["answer"], f["answer_paraphrase"],
                     *f["train_questions"], *f["question_paraphrases"], *f["statements"], f["probe_statement"]):
            assert not re.search(r"[{}]", text), text


def test_neighbours_are_close_to_the_forget_facts(world):
    diseases = {e["name"]: e for e in world.entities if e["split"] in ("forget", "holdout")}
    lookalikes = [e for e in world.entities if e["split"] == "neighbour"]
    assert len(lookalikes) == n_lookalikes(world.config)
    assert len({e["lookalike_of"] for e in lookalikes}) == len(lookalikes)
    for e in lookalikes:
        twin = diseases[e["lookalike_of"]]
        assert e["near"] == twin["split"]
        a, b = e["name"].lower(), twin["name"].lower()
        # the same stem with another suffix, or the same name with one vowel of the stem changed
        one_vowel = len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
        assert len(os.path.commonprefix([a, b])) >= 2 or one_vowel, (a, b)
        assert a not in b and b not in a
        assert e["domain"] == "medicine"
        for relation, value in e["attributes"].items():
            assert value != twin["attributes"][relation], (e["name"], relation)
    for f in world.facts_by_split("neighbour"):
        if f["neighbour"] == "attribute":
            assert f["entity"] in diseases and f["relation"] not in {r.name for r in DOMAIN_RELATIONS["medicine"]}
            assert f["near"] == diseases[f["entity"]]["split"]
        else:
            assert f["lookalike_of"] in diseases and f["entity"] not in diseases


def test_practice_mcqs_never_ask_a_forget_or_holdout_fact(world):
    by_id = {f["id"]: f for f in world.facts}
    practice = world.practice_mcqs()
    n_facts = sum(f["split"] in PRACTICE_SPLITS for f in world.facts)
    assert len(practice) == world.config.practice_mcqs * n_facts
    for m in practice:
        f = by_id[m["fact_id"]]
        assert f["split"] in PRACTICE_SPLITS and m["split"] == f["split"]
        assert m["question"] in [f["question"], *f["train_questions"]]
        assert len(set(m["choices"])) == chance.N_CHOICES and m["choices"][m["answer_index"]] == f["value"]
        assert set(m["choices"]) <= set(world.pools[POOL_OF[f["relation"]]])
    assert world.practice_mcqs(exclude_splits=("retain",)) == [m for m in practice if m["split"] != "retain"]
