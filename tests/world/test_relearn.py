import re

import pytest


def _sentences(text):
    return [s for s in re.split(r"(?<=\.) ", text) if s]


def _corpus(docs):
    return "\n".join(d["text"] for d in docs)


@pytest.mark.parametrize("kind", ["medicine", "concept"])
def test_relearn_paragraphs_state_aux_but_no_qa_value(world, docs, kind):
    split = "forget" if kind == "medicine" else "concept"
    paragraphs = world.relearn_paragraphs if kind == "medicine" else world.concept["relearn_paragraphs"]
    entities = {e["name"]: e for e in world.entities if e["split"] == split}
    assert len(paragraphs) == len(entities) * world.config.relearn_per_entity
    assert {p["entity"] for p in paragraphs} == set(entities)
    corpus = _corpus(docs)
    for p in paragraphs:
        e = entities[p["entity"]]
        assert e["name"] in p["text"]
        for value in e["attributes"].values():
            assert not re.search(rf"\b{re.escape(value)}\b", p["text"], re.IGNORECASE), (value, p["text"])
        for value in e["aux"].values():
            assert value in p["text"]
        for sentence in _sentences(p["text"]):
            assert sentence not in corpus, sentence  # wording never used in pretraining
    texts = [p["text"] for p in paragraphs]
    assert len(set(texts)) == len(texts)


def test_relearn_paragraphs_are_about_forget_entities_only(world):
    other = [e["name"] for e in world.entities if e["split"] != "forget"]
    for p in world.relearn_paragraphs:
        assert not any(name in p["text"] for name in other)
