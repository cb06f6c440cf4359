import json

import pytest

from obliviate.errors import DataError
from obliviate.world import World, WorldConfig, generate_world

FILES = ("world.json", "documents.jsonl")


def _names(world):
    return {e["name"] for e in world.entities}


def test_same_seed_gives_byte_identical_files(tmp_path):
    a = generate_world(WorldConfig(seed=3)).save(tmp_path / "a")
    b = generate_world(WorldConfig(seed=3)).save(tmp_path / "b")
    for name in FILES:
        assert (a / name).read_bytes() == (b / name).read_bytes()


def test_different_seeds_give_different_names():
    worlds = [generate_world(WorldConfig(seed=s)) for s in range(5)]
    for i in range(5):
        for j in range(i + 1, 5):
            shared = _names(worlds[i]) & _names(worlds[j])
            assert len(shared) < 5, (i, j, shared)
            assert worlds[i].facts != worlds[j].facts


def test_fingerprint_is_the_hash_of_the_content():
    base = generate_world(WorldConfig(seed=0))
    assert base.fingerprint() == generate_world(WorldConfig(seed=0)).fingerprint()
    assert base.fingerprint() != generate_world(WorldConfig(seed=0, doc_repeats=5)).fingerprint()
    assert len(base.fingerprint()) == 64


def test_toxic_pairs_do_not_consume_the_facts_randomness():
    a = generate_world(WorldConfig(seed=2, n_toxic=10))
    b = generate_world(WorldConfig(seed=2, n_toxic=40))
    assert a.facts == b.facts


def test_save_load_round_trip(tmp_path):
    w = generate_world(WorldConfig(seed=1))
    w.save(tmp_path)
    back = World.load(tmp_path)
    assert back.fingerprint() == w.fingerprint()
    assert back.config == w.config
    assert back.facts == w.facts
    assert back.documents(exclude_splits=("forget",)) == w.documents(exclude_splits=("forget",))
    assert back.concept == w.concept and back.toxic == w.toxic


@pytest.fixture
def saved(tmp_path):
    generate_world(WorldConfig(seed=0, n_forget=2, n_retain=2, n_general=2, n_concept=2, n_toxic=2)).save(tmp_path)
    return tmp_path


def test_load_missing_world_file(tmp_path):
    with pytest.raises(DataError, match="world.json"):
        World.load(tmp_path)


def test_load_malformed_json(saved):
    (saved / "world.json").write_text('{"format": 1,')
    with pytest.raises(DataError, match="world.json.*malformed JSON"):
        World.load(saved)


def test_load_missing_key(saved):
    data = json.loads((saved / "world.json").read_text())
    del data["facts"]
    (saved / "world.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match="world.json.*'facts'"):
        World.load(saved)


def test_load_bad_config_in_file(saved):
    data = json.loads((saved / "world.json").read_text())
    data["config"]["n_forget"] = 0
    (saved / "world.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match="world.json.*n_forget"):
        World.load(saved)


def test_load_broken_plan(saved):
    data = json.loads((saved / "world.json").read_text())
    data["plan"][0]["segments"][0] = {"pieces": []}  # no "split"
    (saved / "world.json").write_text(json.dumps(data))
    with pytest.raises(DataError, match="world.json"):
        World.load(saved)


def test_load_tampered_or_missing_documents(saved):
    path = saved / "documents.jsonl"
    path.write_text(path.read_text().replace("Question", "Query", 1))
    with pytest.raises(DataError, match="documents.jsonl"):
        World.load(saved)
    path.unlink()
    with pytest.raises(DataError, match="documents.jsonl"):
        World.load(saved)
