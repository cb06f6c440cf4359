"""The recipe framework: recipes are found in the one registry type, filled by ``@recipe`` in each recipe
folder's ``run.py``; modules of :mod:`obliviate.papers` that register nothing are not recipes."""

import pytest

from obliviate.errors import ConfigError
from obliviate.papers import RECIPES, Recipe, available, get_recipe
from obliviate.registry import Registry


def test_the_recipe_folders_register_themselves_and_nothing_else_is_a_recipe():
    assert isinstance(RECIPES, Registry)
    assert available() == ["atwu", "ember", "function-specific", "token-filtering"]  # not compare, bench, tofu
    for name in available():
        entry = RECIPES[name]
        assert isinstance(entry, Recipe) and entry.run.__module__.endswith(".run")
        assert get_recipe(name) == (entry.config, entry.run, entry.description)


def test_an_unknown_recipe_is_one_line_naming_it_and_the_known_ones():
    with pytest.raises(ConfigError) as e:
        get_recipe("embr")
    msg = str(e.value)
    assert "unknown recipe 'embr'" in msg and "did you mean 'ember'" in msg and "token-filtering" in msg
    assert "\n" not in msg


def test_a_name_is_registered_once():
    entry = RECIPES["atwu"]
    RECIPES.add("atwu", entry)  # the same entry again (a module imported twice): fine
    with pytest.raises(RuntimeError, match="registered twice"):
        RECIPES.add("atwu", entry._replace(description="another"))
