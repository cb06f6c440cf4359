"""Sizes of the synthetic world; one dataclass is the config, the saved record and the docs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from obliviate.errors import ConfigError
from obliviate.world.toxic import MAX_PAIRS_PER_PERSON

# Upper bound on every entity count: the syllable name generator and the value pools are sized
# for worlds of this order, and a laptop-CPU pretraining run would not fit anything larger anyway.
MAX_ENTITIES = 1000


@dataclass
class WorldConfig:
    seed: int = 0
    """Everything in the world is a deterministic function of the config; the seed picks names and facts."""
    n_forget: int = 24
    """Medicine diseases whose facts are in pretraining (split "forget")."""
    n_holdout: int = 8
    """Medicine diseases never in pretraining (split "holdout"); may be 0."""
    n_retain: int = 24
    """Biology organisms (split "retain")."""
    n_general: int = 24
    """People (split "general")."""
    n_concept: int = 10
    """Characters of the saga (split "concept")."""
    n_toxic: int = 60
    """Toxic / neutral register sentence pairs about general-domain people; may be 0."""
    register_repeats: int = 1
    """Documents that hold each register sentence (toxic and neutral). With one, the many wordings of the
    people's facts drown the register out: the base model continues "I hate X, that" with X's profession,
    not an insult (the function-specific recipe, which needs a toxic base model, raises it)."""
    n_lookalike: int = 12
    """Look-alike diseases (split "neighbour"): medicine entities named like a forget disease (same
    stem, another suffix) with facts of their own; one per forget disease at most, so a world has
    ``min(n_lookalike, n_forget)`` of them; may be 0."""
    doc_repeats: int = 4
    """Documents that mention each fact of the forget/retain/general/concept/neighbour splits."""
    qa_repeats: int = 2
    """Of those, documents that state it as the canonical "Question: ...\\nAnswer: ..." snippet."""
    para_qa_repeats: int = 1
    """Of those, documents that state it as a QA snippet with a trained paraphrase of the question
    (the relation's ``train_questions``, answered with the canonical answer); may be 0."""
    practice_mcqs: int = 4
    """Lettered MCQs per fact of the retain/general/concept/neighbour splits, for pretraining (never
    of a forget or holdout fact); may be 0."""
    aux_repeats: int = 2
    """Documents that state each auxiliary (non-QA) attribute of a pretrained entity."""
    relearn_per_entity: int = 2
    """Held-out relearning paragraphs per forget disease and per saga character."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"WorldConfig.{f.name} must be an int, got {value!r}")
        minimum = {"seed": None, "n_holdout": 0, "n_toxic": 0, "n_lookalike": 0, "para_qa_repeats": 0,
                   "practice_mcqs": 0}
        for f in fields(self):
            value = getattr(self, f.name)
            low = minimum.get(f.name, 1)
            if low is not None and value < low:
                raise ConfigError(f"WorldConfig.{f.name} must be >= {low}, got {value}")
            if f.name.startswith("n_") and value > MAX_ENTITIES:
                raise ConfigError(f"WorldConfig.{f.name} must be <= {MAX_ENTITIES}, got {value}")
        if self.doc_repeats > 50:
            raise ConfigError(f"WorldConfig.doc_repeats must be <= 50, got {self.doc_repeats}")
        if self.qa_repeats > self.doc_repeats:
            raise ConfigError(
                f"WorldConfig.qa_repeats ({self.qa_repeats}) must be <= doc_repeats ({self.doc_repeats})"
            )
        if self.qa_repeats + self.para_qa_repeats > self.doc_repeats:
            raise ConfigError(
                f"WorldConfig.para_qa_repeats ({self.para_qa_repeats}) + qa_repeats ({self.qa_repeats}) "
                f"must be <= doc_repeats ({self.doc_repeats})"
            )
        if self.practice_mcqs > 20:
            raise ConfigError(f"WorldConfig.practice_mcqs must be <= 20, got {self.practice_mcqs}")
        if self.n_toxic > self.n_general * MAX_PAIRS_PER_PERSON:
            raise ConfigError(
                f"WorldConfig.n_toxic must be <= {MAX_PAIRS_PER_PERSON} * n_general = "
                f"{self.n_general * MAX_PAIRS_PER_PERSON}, got {self.n_toxic}"
            )
        for key in ("aux_repeats", "relearn_per_entity", "register_repeats"):
            if getattr(self, key) > 50:
                raise ConfigError(f"WorldConfig.{key} must be <= 50, got {getattr(self, key)}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "WorldConfig":
        if not isinstance(data, dict):
            raise ConfigError(f"WorldConfig must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown WorldConfig key {unknown[0]!r}")
        return cls(**data)
