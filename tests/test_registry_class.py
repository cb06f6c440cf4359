"""The one registry type (``obliviate.registry.Registry``): a plain class holding a mapping, read as a mapping; the
package's modules are imported on the first look-up, not before; an unknown name is one line."""

import sys
from collections.abc import Mapping

import pytest

from obliviate.errors import ConfigError, DataError
from obliviate.registry import Registry


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A package ``regprobe`` whose two public modules register ``a`` and ``b`` when imported (``_private`` is never
    imported), and its registry."""
    pkg = tmp_path / "regprobe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from obliviate.registry import Registry\n\n"
                                     "REG = Registry('plugin', package=__name__)\nIMPORTED = []\n")
    for name in ("a", "b"):
        (pkg / f"{name}.py").write_text(f"from regprobe import IMPORTED, REG\n\nIMPORTED.append({name!r})\n"
                                        f"REG.add({name!r}, {name!r}.upper())\n")
    (pkg / "_private.py").write_text("raise RuntimeError('a private module is not a plugin')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import regprobe

    yield regprobe
    for mod in [m for m in sys.modules if m == "regprobe" or m.startswith("regprobe.")]:
        del sys.modules[mod]


def test_modules_are_imported_on_the_first_look_up_only(plugins):
    reg = plugins.REG
    assert not isinstance(reg, dict) and isinstance(reg, Mapping)
    assert plugins.IMPORTED == [] and reg.registered("a") is None  # a decorator's look, no import
    assert repr(reg) == "Registry('plugin', 0 registered so far)"
    assert reg["a"] == "A" and sorted(plugins.IMPORTED) == ["a", "b"]
    assert reg.names() == ["a", "b"] and sorted(reg) == ["a", "b"]
    assert dict(reg.items()) == {"a": "A", "b": "B"} and len(reg) == 2 and "b" in reg and "c" not in reg
    assert reg.get("c") is None and reg.get("c", 1) == 1 and reg.registered("b") == "B"
    reg["a"], reg["b"], len(reg)
    assert sorted(plugins.IMPORTED) == ["a", "b"]  # once


def test_add_remove_and_an_unknown_name(plugins):
    reg = plugins.REG
    reg.add("c", "C")
    reg.add("c", "C")  # the same entry again: fine
    with pytest.raises(RuntimeError, match="plugin 'c' registered twice"):
        reg.add("c", "another")
    assert reg.remove("c") == "C" and reg.remove("c") is None and "c" not in reg
    with pytest.raises(ConfigError) as e:
        reg.lookup("bb")
    assert str(e.value) == "unknown plugin 'bb' (did you mean 'b'?); known: a, b"
    with pytest.raises(KeyError):
        reg["bb"]


def test_a_registry_without_a_package_and_its_own_error():
    reg = Registry("benchmark", error=DataError)
    reg.add("x", 1)
    assert reg.lookup("x") == 1 and reg.names() == ["x"]
    with pytest.raises(DataError, match="unknown benchmark 'y'; known: x"):
        reg.lookup("y")


def test_register_returns_the_object_and_stores_what_wrap_makes_of_it():
    reg = Registry("thing")

    @reg.register("f", wrap=lambda fn: ("wrapped", fn))
    def f():
        return 1

    assert f() == 1 and reg["f"] == ("wrapped", f)
