import re

from obliviate.world import TOXIC_LEXICON
from obliviate.world.names import words_of


def test_concept_data_shapes(default_world):
    c = default_world.concept
    assert c["name"].startswith("the Chronicles of ")
    assert len(c["concept_sentences"]) >= 100 and len(c["neutral_sentences"]) >= 100
    assert len(set(c["concept_sentences"])) == len(c["concept_sentences"])
    assert c["mcqs"] == default_world.mcqs(split="concept") and c["mcqs"]
    assert len(c["coherence_prompts"]) >= 10


def test_concept_terms(world):
    c = world.concept
    exclusive = c["exclusive_terms"]
    characters = [e["name"] for e in world.entities if e["split"] == "concept"]
    assert set(characters) <= set(exclusive)
    assert world.concept["name"].split()[-1] in exclusive
    concept_text = " ".join(c["concept_sentences"])
    for sentence in c["neutral_sentences"] + c["coherence_prompts"]:
        assert not any(term in sentence for term in exclusive), sentence
    assert sum(any(t in s for t in exclusive) for s in c["concept_sentences"]) == len(c["concept_sentences"])
    shared = set(c["shared_terms"])
    assert shared and shared == words_of(c["concept_sentences"]) & words_of(c["neutral_sentences"])
    assert not shared & {t.lower() for t in exclusive}
    assert all(term in concept_text for term in exclusive)


def test_toxic_pairs(world):
    t = world.toxic
    n = world.config.n_toxic
    assert len(t["toxic_sentences"]) == len(t["neutral_sentences"]) == n
    assert list(t["lexicon"]) == list(TOXIC_LEXICON)
    lexicon = [re.compile(rf"\b{re.escape(w)}\b", re.IGNORECASE) for w in TOXIC_LEXICON]
    people = {e["name"]: e for e in world.entities if e["split"] == "general"}
    for tox, neu in zip(t["toxic_sentences"], t["neutral_sentences"]):
        assert (tox["toxic"], neu["toxic"]) == (1, 0)
        assert tox["person"] == neu["person"] and tox["person"] in people
        habit = people[tox["person"]]["aux"]["habit"]
        for s in (tox, neu):  # same content: the person and their habit
            assert s["person"] in s["text"] and habit in s["text"]
        assert any(p.search(tox["text"]) for p in lexicon)
        assert not any(p.search(neu["text"]) for p in lexicon)
    for key in ("toxic_sentences", "neutral_sentences"):
        texts = [s["text"] for s in t[key]]
        assert len(set(texts)) == len(texts)


def test_toxicity_prompts(world):
    t = world.toxic
    prompts = t["prompts"]
    toxic = [p["text"] for p in prompts if p["toxic"] == 1]
    neutral = [p["text"] for p in prompts if p["toxic"] == 0]
    assert len(toxic) == len(neutral) and (toxic or world.config.n_toxic == 0)
    assert len(set(toxic + neutral)) == len(prompts)
    for text in toxic:
        assert any(s["text"].startswith(text + " ") for s in t["toxic_sentences"])
        assert not any(s["text"].startswith(text + " ") for s in t["neutral_sentences"])
    for text in neutral:
        assert any(s["text"].startswith(text + " ") for s in t["neutral_sentences"])
