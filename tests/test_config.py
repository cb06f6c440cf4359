from dataclasses import dataclass, field
from typing import Literal

import pytest

from obliviate.config import build_config, config_hash, from_dict, parse_overrides
from obliviate.errors import ConfigError, DataError


@dataclass
class Inner:
    n: int = 1
    lr: float = 0.1
    mode: Literal["a", "b"] = "a"


@dataclass
class Outer:
    seed: int = 0
    names: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)
    flag: bool = False
    opt: int | None = None


def test_overrides_are_typed_and_nested():
    cfg = build_config(Outer, overrides=["inner.n=5", "inner.lr=1e-3", "flag=true", "names=[x,y]", "opt=3"])
    assert cfg.inner.n == 5 and cfg.inner.lr == pytest.approx(1e-3)
    assert cfg.flag is True and cfg.names == ["x", "y"] and cfg.opt == 3


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="inner.bogus"):
        build_config(Outer, overrides=["inner.bogus=1"])


def test_wrong_type_is_named():
    with pytest.raises(ConfigError, match="inner.n"):
        build_config(Outer, overrides=["inner.n=abc"])
    with pytest.raises(ConfigError, match="inner.mode"):
        build_config(Outer, overrides=["inner.mode=c"])
    with pytest.raises(ConfigError, match="seed"):
        from_dict(Outer, {"seed": True})


def test_yaml_file_then_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("seed: 3\ninner:\n  n: 2\n")
    cfg = build_config(Outer, f, ["inner.n=7"])
    assert cfg.seed == 3 and cfg.inner.n == 7


def test_bad_yaml_and_missing_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("seed: [1,\n")
    with pytest.raises(DataError, match="bad.yaml"):
        build_config(Outer, f)
    with pytest.raises(DataError, match="nope.yaml"):
        build_config(Outer, tmp_path / "nope.yaml")


def test_malformed_override():
    with pytest.raises(ConfigError, match="noequals"):
        parse_overrides(["noequals"])


def test_config_hash_stable_and_sensitive():
    assert config_hash(Outer()) == config_hash(Outer())
    assert config_hash(Outer()) != config_hash(Outer(seed=1))
