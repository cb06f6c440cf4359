import pytest

from obliviate.errors import ConfigError
from obliviate.world import WorldConfig, chance, generate_world


@pytest.mark.parametrize(
    "field, value",
    [
        ("n_forget", 0),
        ("n_retain", -1),
        ("n_general", 0),
        ("n_concept", 2.5),
        ("n_holdout", -1),
        ("n_toxic", -3),
        ("doc_repeats", 0),
        ("seed", "0"),
        ("n_forget", True),  # bool is an int subclass but never a count
        ("n_forget", 5000),
    ],
)
def test_bad_field_raises_config_error_naming_it(field, value):
    with pytest.raises(ConfigError, match=field):
        WorldConfig(**{field: value})


def test_qa_repeats_cannot_exceed_doc_repeats():
    with pytest.raises(ConfigError, match="qa_repeats"):
        WorldConfig(doc_repeats=2, qa_repeats=3)


def test_more_toxic_pairs_than_combinations_is_rejected():
    WorldConfig(n_general=1, n_toxic=30)  # 5 frames x 6 adjectives: the most one person allows
    with pytest.raises(ConfigError, match="n_toxic"):
        WorldConfig(n_general=1, n_toxic=31)


def test_from_dict_rejects_unknown_key():
    with pytest.raises(ConfigError, match="n_forgett"):
        WorldConfig.from_dict({"n_forgett": 3})
    assert WorldConfig.from_dict({"seed": 5}) == WorldConfig(seed=5)


def test_generate_world_rejects_non_config():
    with pytest.raises(ConfigError, match="WorldConfig"):
        generate_world({"seed": 1})


def test_unknown_split_or_domain_is_a_config_error():
    w = generate_world(WorldConfig(seed=0, n_forget=1, n_retain=1, n_general=1, n_concept=1, n_toxic=0))
    with pytest.raises(ConfigError, match="forgot"):
        w.documents(exclude_splits=("forgot",))
    with pytest.raises(ConfigError, match="retian"):
        w.facts_by_split("retian")
    with pytest.raises(ConfigError, match="chemistry"):
        w.mcqs(domain="chemistry")


def test_chance_constants():
    assert chance.MCQ_CHANCE == 0.25
    assert chance.N_CHOICES == 4
