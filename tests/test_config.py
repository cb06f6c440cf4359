import time
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


# --------------------------------------------------------------------------- issue #16: floats, YAML files


@pytest.mark.parametrize("raw,shown", [("nan", "nan"), (".nan", "nan"), ("inf", "inf"), ("-.inf", "-inf"),
                                       ("1e999", "1e999")])
def test_non_finite_floats_are_refused_naming_the_key(raw, shown, tmp_path):
    with pytest.raises(ConfigError, match=rf"^config key 'inner.lr': must be a finite number, got {shown}$"):
        build_config(Outer, overrides=[f"inner.lr={raw}"])
    f = tmp_path / "c.yaml"
    f.write_text(f"inner:\n  lr: {raw}\n")
    with pytest.raises(ConfigError, match="config key 'inner.lr': must be a finite number"):
        build_config(Outer, f)
    with pytest.raises(ConfigError, match="config key 'inner.lr': must be a finite number, got inf"):
        from_dict(Outer, {"inner": {"lr": 10**400}})  # an int beyond the float range


@dataclass
class MaybeFloat:
    x: float | None = None


def test_non_finite_optional_float_says_why():
    assert from_dict(MaybeFloat, {"x": None}).x is None
    with pytest.raises(ConfigError, match=r"^config key 'x': must be a finite number, got nan$"):
        from_dict(MaybeFloat, {"x": float("nan")})


def test_yaml_duplicate_keys_are_refused_naming_key_and_line(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("seed: 1\ninner:\n  n: 2\n  lr: 0.5\n  n: 3\n")
    with pytest.raises(DataError, match=r"dup.yaml is not valid YAML \(line 5\): duplicate key 'n' "
                                        r"\(first given on line 3\)$"):
        build_config(Outer, f)
    f.write_text("seed: 1\nseed: 2\n")
    with pytest.raises(DataError, match=r"\(line 2\): duplicate key 'seed'"):
        build_config(Outer, f)


BILLION_LAUGHS = "a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8))


def test_billion_laughs_is_refused_at_once(tmp_path):
    """Nine levels of nine aliases would expand to 9**9 strings; the first alias is refused instead."""
    f = tmp_path / "laughs.yaml"
    f.write_text(BILLION_LAUGHS)
    start = time.perf_counter()
    with pytest.raises(DataError, match=r"laughs.yaml is not valid YAML \(line 2\): uses the alias \*a; YAML "
                                        r"aliases are not supported"):
        build_config(Outer, f)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize("content,message", [
    (b"seed: 1\nnames: [caf\xe9]\n", r"bad.yaml line 2: not valid UTF-8 \(invalid continuation byte, byte 0xe9\)$"),
    (("names: " + "[" * 20000 + "]" * 20000 + "\n").encode(), r"bad.yaml is not valid YAML \(line 1\): nested more "
                                                              r"than 100 levels deep$"),
    (("seed: " + "1" * 5000 + "\n").encode(), r"bad.yaml is not valid YAML \(line 1\): an integer of 5000 "
                                              r"characters is too large$"),
])
def test_hostile_yaml_files_give_one_line_errors(content, message, tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_bytes(content)
    with pytest.raises(DataError, match=message) as e:
        build_config(Outer, f)
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


def test_error_messages_cap_long_values():
    with pytest.raises(ConfigError) as e:
        build_config(Outer, overrides=["seed=" + "x" * 10_000])
    assert str(e.value) == "config key 'seed': expected an integer, got '" + "x" * 79 + "..."
    with pytest.raises(ConfigError, match=r"^config key 'seed': an integer of 5000 digits is too large, "
                                          r"got '1{79}\.\.\.$"):
        build_config(Outer, overrides=["seed=" + "1" * 5000])  # the override parser leaves it as text
    with pytest.raises(ConfigError) as e:
        build_config(Outer, overrides=["x" * 10_000])
    assert len(str(e.value)) < 150
