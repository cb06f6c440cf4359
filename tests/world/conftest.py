import pytest

from obliviate.world import WorldConfig, generate_world

SEEDS = (0, 1, 2, 3, 4)
# The smallest world the config allows (no holdout, no toxic pairs) must keep every invariant too.
SMALL = WorldConfig(seed=7, n_forget=1, n_holdout=0, n_retain=1, n_general=1, n_concept=1, n_toxic=0)


@pytest.fixture(scope="session", params=[*SEEDS, "small"], ids=lambda p: f"seed{p}" if p != "small" else p)
def world(request):
    config = SMALL if request.param == "small" else WorldConfig(seed=request.param)
    return generate_world(config)


@pytest.fixture(scope="session")
def docs(world):
    """The full pretraining corpus of ``world``."""
    return world.documents()


@pytest.fixture(scope="session")
def oracle_docs(world):
    """The corpus without the forget split."""
    return world.documents(exclude_splits=("forget",))


@pytest.fixture(scope="session", params=SEEDS, ids=lambda s: f"seed{s}")
def default_world(request):
    """Default-sized worlds only (for size claims such as >= 100 concept sentences)."""
    return generate_world(WorldConfig(seed=request.param))

