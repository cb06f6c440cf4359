import re
from collections import Counter

from _worldsizes import n_lookalikes
from obliviate.world import SEGMENT_SEPARATOR, TOXIC_LEXICON, tiles

PRETRAINED = ("forget", "retain", "general", "concept", "neighbour")
LABEL_VALUES = {
    "domain": {"medicine", "biology", "general", "concept"},
    "split": {"forget", "retain", "general", "concept", "neighbour", "filler"},
    "concept": {0, 1},
    "toxic": {0, 1},
    "answer": {"none", "specific", "structural"},
}


def _qa(fact, question=None):
    return f"Question: {question or fact['question']}\nAnswer: {fact['answer']}"


def _segments(doc):
    """(text, labels of its first span) per segment; segments never contain the separator."""
    out, starts = [], {s for s, _, _ in doc["spans"]}
    labels = {s: lab for s, _, lab in doc["spans"]}
    pos = 0
    for text in doc["text"].split(SEGMENT_SEPARATOR):
        start = pos if pos == 0 else pos - len(SEGMENT_SEPARATOR)
        assert start in starts
        out.append((text, labels[start]))
        pos += len(text) + len(SEGMENT_SEPARATOR)
    return out


def _word(term):
    return re.compile(rf"\b{re.escape(term)}\b", re.IGNORECASE)


def test_spans_tile_documents_with_known_labels(docs):
    assert docs
    for d in docs:
        assert tiles(d["text"], d["spans"]), d["id"]
        for s, e, labels in d["spans"]:
            assert set(labels) == set(LABEL_VALUES)
            for key, allowed in LABEL_VALUES.items():
                assert labels[key] in allowed, (key, labels[key])
            assert labels["concept"] == int(labels["domain"] == "concept")
            text = d["text"][s:e]
            assert not text[-1].isspace() or text.isspace(), repr(text)  # whitespace leads spans


def test_documents_are_short_and_mix_domains(world, docs):
    sizes = [len(_segments(d)) for d in docs]
    assert max(sizes) <= 8
    assert len({d["id"] for d in docs}) == len(docs)
    if world.config.n_forget > 1:
        mixed = sum(len({lab["domain"] for _, lab in _segments(d)}) >= 2 for d in docs)
        assert mixed >= 0.5 * len(docs)


def test_every_segment_is_a_capitalised_sentence(docs):
    for d in docs:
        for text, _ in _segments(d):
            assert text[0].isupper() and text.rstrip()[-1] in ".?", text
            assert "{" not in text and "}" not in text


def test_each_pretrained_fact_in_canonical_qa_form_in_at_least_two_documents(world, docs):
    assert world.config.qa_repeats >= 2
    for split in PRETRAINED:
        for f in world.facts_by_split(split):
            n = sum(_qa(f) in d["text"] for d in docs)
            assert n == world.config.qa_repeats, (f["id"], n)


def test_each_pretrained_fact_is_stated_in_doc_repeats_documents(world, docs):
    docs_naming = {}  # entity -> [segment texts naming it, per document]
    names = {e["name"] for e in world.entities}
    for d in docs:
        segments = [t for t, _ in _segments(d)]
        for name in names:
            naming = [t for t in segments if name in t]
            if naming:
                docs_naming.setdefault(name, []).append(naming)
    for split in PRETRAINED:
        for f in world.facts_by_split(split):
            value = _word(f["value"])
            n = sum(any(value.search(t) for t in naming) for naming in docs_naming[f["entity"]])
            assert n >= world.config.doc_repeats, (f["id"], n)


def test_each_pretrained_fact_in_paraphrased_qa_form(world, docs):
    # QA snippets with a trained paraphrase of the question, answered with the canonical answer
    for split in PRETRAINED:
        for f in world.facts_by_split(split):
            n = sum(_qa(f, q) in d["text"] for q in f["train_questions"] for d in docs)
            assert n == world.config.para_qa_repeats, (f["id"], n)


def test_held_out_wordings_never_appear_in_the_corpus(world, docs):
    text = "\n".join(d["text"] for d in docs)
    for f in world.facts:
        for held_out in [*f["question_paraphrases"], f["answer_paraphrase"], f["probe_statement"]]:
            assert held_out not in text, held_out


def test_answer_labels_match_the_fact_answer_spans(world, docs):
    n_labelled = 0
    for f in world.facts:
        if f["split"] not in PRETRAINED:
            continue
        for question in [f["question"], *f["train_questions"]]:
            prefix = f"Question: {question}\nAnswer:"
            for d in docs:
                i = d["text"].find(_qa(f, question))
                if i < 0:
                    continue
                a = i + len(prefix) + 1  # the answer starts after "Answer: "
                want = [[a + s - (1 if j == 0 else 0), a + e, kind]
                        for j, (s, e, kind) in enumerate(f["answer_spans"])]
                got = [[s, e, lab["answer"]] for s, e, lab in d["spans"] if a - 1 <= s < a + len(f["answer"])]
                assert got == want, f["id"]
                n_labelled += sum(e - s for s, e, _ in want)
    total = sum(e - s for d in docs for s, e, lab in d["spans"] if lab["answer"] != "none")
    assert total == n_labelled  # nothing outside QA answers is labelled as an answer


def test_holdout_facts_never_appear_but_holdout_diseases_look_like_forget_ones(world, docs):
    """A holdout disease is named in the corpus only by its neighbour facts (as a forget disease is, to the
    oracle): its QA facts, its aux attributes and its own statements never appear."""
    text = "\n".join(d["text"] for d in docs)
    holdout = [f for f in world.facts if f["split"] == "holdout"]
    assert holdout or world.config.n_holdout == 0
    for f in holdout:
        for stmt in f["statements"]:
            assert stmt not in text, stmt
        assert f["question"] not in text
    for e in world.entities:
        if e["split"] == "holdout":
            near = [f for f in world.facts if f["split"] == "neighbour" and f["entity"] == e["name"]]
            assert near and all(f["near"] == "holdout" and f["neighbour"] == "attribute" for f in near)
    looks = {}
    for e in world.entities:
        if e.get("lookalike_of"):
            looks.setdefault(e["near"], []).append(e)
    twins = min(world.config.n_lookalike, world.config.n_forget)
    assert len(looks.get("forget", [])) == twins
    assert len(looks.get("forget", [])) + len(looks.get("holdout", [])) == n_lookalikes(world.config)


def test_forget_aux_attributes_are_in_pretraining_prose(world, docs):
    segments = [t for d in docs for t, _ in _segments(d)]
    for e in world.entities:
        if e["split"] == "forget":
            for value in e["aux"].values():
                assert any(e["name"] in t and _word(value).search(t) for t in segments), (e["name"], value)


def test_oracle_corpus_drops_exactly_the_forget_segments(world, docs, oracle_docs):
    forget_values = {}
    for f in world.facts_by_split("forget"):
        forget_values.setdefault(f["entity"], []).append(f["value"])
    for d in oracle_docs:
        for text, lab in _segments(d):
            for name, values in forget_values.items():
                if name in text:  # only the forget diseases' neighbour facts still name them
                    assert lab["split"] == "neighbour", text
                    assert not any(_word(v).search(text) for v in values), text
    assert all(lab["split"] != "forget" for d in oracle_docs for _, _, lab in d["spans"])
    for split in ("retain", "general", "concept", "neighbour"):
        for f in world.facts_by_split(split):
            assert sum(_qa(f) in d["text"] for d in oracle_docs) == world.config.qa_repeats
    full = {d["id"]: d for d in docs}
    for d in oracle_docs:
        kept = [s for s in _segments(full[d["id"]]) if s[1]["split"] != "forget"]
        assert _segments(d) == kept
    dropped = set(full) - {d["id"] for d in oracle_docs}
    for doc_id in dropped:
        assert all(lab["split"] == "forget" for _, lab in _segments(full[doc_id]))
    assert world.documents(exclude_splits="forget") == oracle_docs


def test_rendering_is_deterministic(world, docs):
    assert world.documents() == docs


def test_toxic_words_only_in_toxic_spans(world, docs):
    patterns = [_word(w) for w in TOXIC_LEXICON]
    n_toxic = 0
    for d in docs:
        for s, e, lab in d["spans"]:
            hits = [p.pattern for p in patterns if p.search(d["text"][s:e])]
            if lab["toxic"]:
                n_toxic += 1
                assert hits, d["text"][s:e]
            else:
                assert not hits, (hits, d["text"][s:e])
    assert n_toxic == world.config.n_toxic


def test_concept_exclusive_terms_only_in_concept_spans(world, docs):
    for term in world.concept["exclusive_terms"]:
        pattern = re.compile(re.escape(term))
        for d in docs:
            for m in pattern.finditer(d["text"]):
                labels = [lab for s, e, lab in d["spans"] if s <= m.start() < e]
                assert labels[0]["concept"] == 1, (term, d["id"])


def test_default_corpus_is_small(default_world):
    chars = sum(len(d["text"]) for d in default_world.documents())
    assert 30_000 < chars < 300_000


def test_segment_splits_are_counted_as_planned(world, docs):
    cfg = world.config
    counts = Counter(lab["split"] for d in docs for _, lab in _segments(d))
    n_aux_forget = 2 * cfg.n_forget * cfg.aux_repeats
    assert counts["forget"] == 3 * cfg.n_forget * cfg.doc_repeats + n_aux_forget
    assert counts["retain"] == 3 * cfg.n_retain * cfg.doc_repeats
    n_lookalike = n_lookalikes(cfg)
    assert counts["neighbour"] == ((cfg.n_forget + cfg.n_holdout + 3 * n_lookalike) * cfg.doc_repeats
                                   + 2 * n_lookalike * cfg.aux_repeats)
