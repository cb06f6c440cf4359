"""A seeded synthetic world of fictitious entities: the default dataset of obliviate.

Four domains, all invented and deterministic from ``WorldConfig.seed``:

- medicine (forget / holdout splits): diseases, treated_with / main_symptom / affected_organ,
  plus auxiliary first_recorded_in / first_described (used only for relearning attacks);
- biology (retain split): organisms, habitat / diet / distinctive_trait, worded like medicine;
- general (general split): people, birthplace / birth_year / profession, plus toxic and
  neutral register sentences about their habits;
- concept (concept split): characters of one saga, wields / homeland / serves (EMBER-style data
  in ``World.concept``).

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
