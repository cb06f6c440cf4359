"""A seeded synthetic world of fictitious entities: the default dataset of obliviate. Four domains (medicine
to forget, biology to retain, general people, a fictional saga), all invented and deterministic from
``WorldConfig.seed``: docs/world.md.

>>> from obliviate.world import WorldConfig, generate_world
>>> w = generate_world(WorldConfig(seed=3))
>>> docs = w.documents(exclude_splits=("forget",))   # the oracle's corpus
"""

from obliviate.world import chance
from obliviate.world.config import WorldConfig
from obliviate.world.generate import generate_world
from obliviate.world.spans import tiles
from obliviate.world.toxic import TOXIC_LEXICON
from obliviate.world.record import SEGMENT_SEPARATOR, SEGMENT_SPLITS, SPLITS, World

__all__ = [
    "SEGMENT_SEPARATOR", "SEGMENT_SPLITS", "SPLITS", "TOXIC_LEXICON", "World", "WorldConfig",
    "chance", "generate_world", "tiles",
]
