"""Typed configs: dataclasses, YAML files and dotted command-line overrides.

One dataclass is the CLI surface, the saved config and the documentation. A
config is built from defaults, then a YAML file, then ``key.sub=value``
overrides; every step is validated against the dataclass field types, and an
unknown key or a value of the wrong type raises :class:`ConfigError` naming it.

Output paths. A field that names something the run *writes* (a cache, a report)
is declared ``field(default="judge_cache", metadata={"output_path": True})``;
a config value for it must be a relative path that stays inside the run
directory (no absolute path, no ``~``, no ``..`` climbing out), and the command
joins it to ``--out`` with :func:`output_path`. Only an explicit command-line
flag may point elsewhere (``output_path(out, args.flag, "--flag", explicit=True)``).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from obliviate.errors import ConfigError, DataError


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Return ``value`` converted to ``tp`` or raise ConfigError naming ``key``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"config key '{key}': {value!r} is not a valid {_type_name(tp)}")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(f"config key '{key}': {value!r} is not one of {list(choices)}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""] if value else []
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}': expected a list, got {value!r}")
        args = get_args(tp)
        inner = args[0] if args else Any
        out = [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
        return out if origin is list else tuple(out)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {value!r}")
        return from_dict(tp, value, prefix=key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"config key '{key}': expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"config key '{key}': expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"config key '{key}': expected a string, got {value!r}")
    return value


def _check_relative_output(value: str, key: str) -> None:
    """ConfigError unless ``value`` is a relative path that does not climb out of its base directory."""
    text = str(value)
    if text.startswith("~") or Path(text).is_absolute() or Path(text).anchor:
        raise ConfigError(f"config key '{key}': output path {text!r} is absolute; a config may only name paths "
                          "inside the run directory (--out); pass an explicit command-line option to write elsewhere")
    depth = 0
    for part in Path(text).parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise ConfigError(f"config key '{key}': output path {text!r} climbs outside the run directory; "
                              "a config may only name paths inside --out")


def output_path(out: str | Path, value: str | Path, key: str, *, explicit: bool = False) -> Path:
    """Where an output named by config key ``key`` goes: ``out / value``, checked to stay inside ``out``.

    ``explicit=True`` (a value the user gave as a command-line option) returns ``Path(value)``
    unchanged, wherever it points. Otherwise an absolute ``value``, one with ``..`` climbing out,
    or one that leaves ``out`` through a symbolic link raises :class:`ConfigError` naming ``key``.
    """
    if explicit:
        return Path(value)
    _check_relative_output(str(value), key)
    base = Path(out)
    target = base / value
    real_base, real_target = base.resolve(), target.resolve()
    if real_target != real_base and real_base not in real_target.parents:
        raise ConfigError(f"config key '{key}': output path {str(value)!r} leads outside the run directory "
                          f"{str(base)!r} (through a symbolic link)")
    return Path(os.path.normpath(target))


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``, validating keys and types (and output paths, see the module doc)."""
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix or '<root>'}' must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise ConfigError(f"unknown config key '{full}' (known: {', '.join(sorted(fields))})")
        factory = fields[key].default_factory
        if isinstance(value, dict) and dataclasses.is_dataclass(hints[key]) and factory is not dataclasses.MISSING:
            # A partial section changes the keys it names and keeps the field's own defaults for the rest
            # (``unlearn.train.steps=10`` must not reset the unlearning lr and schedule to TrainConfig's).
            value = deep_merge(to_dict(factory()), value)
        kwargs[key] = _coerce(value, hints[key], full)
        if fields[key].metadata.get("output_path") and kwargs[key] is not None:
            _check_relative_output(kwargs[key], full)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        msg = str(e)
        if prefix and "config key '" in msg and f"'{prefix}." not in msg:
            msg = msg.replace("config key '", f"config key '{prefix}.", 1)
        raise ConfigError(msg) from None


def to_dict(cfg: Any) -> dict:
    """Plain-dict (JSON/YAML-serialisable) view of a config dataclass."""
    return dataclasses.asdict(cfg)


def parse_overrides(items: list[str]) -> dict:
    """Turn ``["a.b=1", "c=x"]`` into a nested dict of YAML-parsed values."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override '{item}' is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override '{item}' has an empty key")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}' conflicts with an earlier override")
        node[parts[-1]] = value
    return out


def deep_merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise DataError(f"config file {path} is not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DataError(f"config file {path} must contain a mapping at top level")
    return data


def build_config(cls: type, config_file: str | Path | None = None, overrides: list[str] | None = None,
                 base: dict | None = None) -> Any:
    """Defaults, then ``base``, then the YAML file, then dotted overrides."""
    data: dict = dict(base or {})
    if config_file:
        data = deep_merge(data, load_yaml(config_file))
    if overrides:
        data = deep_merge(data, parse_overrides(overrides))
    return from_dict(cls, data)


def config_hash(obj: Any) -> str:
    """Stable short hash of a config (dataclass or dict) for caching."""
    import hashlib
    import json

    if dataclasses.is_dataclass(obj):
        obj = to_dict(obj)
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
