"""Typed configs: dataclasses, YAML files and dotted command-line overrides, validated at every step (an
unknown key or a wrongly typed value is a :class:`ConfigError` naming it). Fields marked ``output_path`` stay
inside the run directory (:func:`output_path`). docs/architecture.md, "Configs".
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Callable, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from obliviate.errors import ConfigError, DataError
from obliviate.utils import SEED_LIMIT, note_input


SHOWN_CHARS = 80
"""Error messages show at most this many characters of a bad value."""

MAX_YAML_DEPTH = 100
"""A YAML file nested deeper than this is refused (configs need a handful of levels)."""




def is_seed_key(name: str) -> bool:
    """Whether config field ``name`` holds a seed (``seed``, ``split_seed``, ...)."""
    return name == "seed" or name.endswith("_seed")


def check_seed_value(value: Any, key: str) -> None:
    """ConfigError naming ``key`` unless ``value`` (an int, or None) lies in ``[0, SEED_LIMIT)``."""
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < SEED_LIMIT:
        shown = str(value) if len(str(value)) <= SHOWN_CHARS else f"an integer of {len(str(value))} digits"
        raise ConfigError(f"config key '{key}': a seed must be an integer in [0, 2**32) = [0, "
                          f"{SEED_LIMIT - 1}], got {shown}")


def show(value: Any) -> str:
    """``repr(value)`` cut to :data:`SHOWN_CHARS` characters (``...`` marks a cut), for error messages."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


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
                errors.append(e)
        if len(errors) == 1:  # ``float | None``: the float's own message says what is wrong
            raise errors[0]
        raise ConfigError(f"config key '{key}': {show(value)} is not a valid {_type_name(tp)}")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(f"config key '{key}': {show(value)} is not one of {list(choices)}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""] if value else []
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}': expected a list, got {show(value)}")
        args = get_args(tp)
        inner = args[0] if args else Any
        out = [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
        return out if origin is list else tuple(out)
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {show(value)}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {show(value)}")
        return from_dict(tp, value, prefix=key)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"config key '{key}': expected true/false, got {show(value)}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected an integer, got {show(value)}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError as e:
                if "digits" in str(e):  # CPython's limit on the digits of an int
                    raise ConfigError(f"config key '{key}': an integer of {len(value.strip())} digits is too "
                                      f"large, got {show(value)}") from None
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"config key '{key}': expected an integer, got {show(value)}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected a number, got {show(value)}")
        number = None
        if isinstance(value, (int, float)):
            try:
                number = float(value)
            except OverflowError:  # an int beyond the float range
                number = math.inf
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"config key '{key}': expected a number, got {show(value)}")
        if not math.isfinite(number):  # NaN or infinity: no config value means either
            shown = value if isinstance(value, str) else number
            raise ConfigError(f"config key '{key}': must be a finite number, got {str(shown)[:SHOWN_CHARS]}")
        return number
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"config key '{key}': expected a string, got {show(value)}")
    return value


def _check_relative_output(value: str, key: str) -> None:
    """ConfigError unless ``value`` is a relative path that does not climb out of its base directory."""
    text = str(value)
    if text.startswith("~") or Path(text).is_absolute() or Path(text).anchor:
        raise ConfigError(f"config key '{key}': output path {show(text)} is absolute; a config may only name "
                          "paths inside the run directory (--out); pass an "
                          "explicit command-line option to write elsewhere")
    depth = 0
    for part in Path(text).parts:
        depth += -1 if part == ".." else (0 if part == "." else 1)
        if depth < 0:
            raise ConfigError(f"config key '{key}': output path {show(text)} climbs outside the run "
                              "directory; a config may only name paths inside --out")


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
        raise ConfigError(f"config key '{key}': output path {show(str(value))} leads outside the run "
                          f"directory {str(base)!r} (through a symbolic link)")
    return Path(os.path.normpath(target))


def check_ranges(cfg: Any, *, positive: tuple[str, ...] = (), nonnegative: tuple[str, ...] = (),
                 fraction: tuple[str, ...] = (), at_least_one: tuple[str, ...] = (),
                 indices: tuple[str, ...] = ()) -> None:
    """One :class:`ConfigError` line naming the first field of ``cfg`` out of its range (a config's
    ``__post_init__`` calls it): ``positive`` numbers > 0, ``nonnegative`` >= 0, ``fraction`` in [0, 1],
    ``at_least_one`` integers >= 1, ``indices`` layer indices >= 0 (an int or a list of them). A field set
    to None passes (None means "the default"); every number must be finite."""
    rules = [(positive, lambda v: v > 0, "> 0"), (nonnegative, lambda v: v >= 0, ">= 0"),
             (fraction, lambda v: 0 <= v <= 1, "in [0, 1]"), (at_least_one, lambda v: v >= 1, ">= 1"),
             (indices, lambda v: v >= 0, "a layer index >= 0")]
    for names, ok, what in rules:
        for name in names:
            value = getattr(cfg, name)
            for v in (value if isinstance(value, (list, tuple)) else [value]):
                if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                if not math.isfinite(v):
                    raise ConfigError(f"config key '{name}': must be a finite number, got {v}")
                if not ok(v):
                    raise ConfigError(f"config key '{name}': must be {what}, got {show(value)}")


def from_dict(cls: type, data: dict, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``, validating keys and types (and output paths, see the module
    doc); a class with a ``from_config(data, prefix)`` classmethod builds itself (the attacks' ``{name:
    config}``)."""
    hook = getattr(cls, "from_config", None)
    if hook is not None:
        return hook(data, prefix)
    return from_fields(cls, data, prefix)


def from_fields(cls: type, data: dict, prefix: str = "") -> Any:
    """:func:`from_dict` on the fields of ``cls`` alone."""
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix or '<root>'}' must be a mapping, got {show(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise ConfigError(f"unknown config key '{full[:SHOWN_CHARS]}' (known: "
                              f"{', '.join(sorted(fields))})")
        factory = fields[key].default_factory
        if isinstance(value,
                      dict) and dataclasses.is_dataclass(hints[key]) and factory is not dataclasses.MISSING:
            # A partial section changes the keys it names and keeps the field's own defaults for the rest
            # (``unlearn.train.steps=10`` must not reset the unlearning lr and schedule to TrainConfig's).
            value = deep_merge(to_dict(factory()), value)
        kwargs[key] = _coerce(value, hints[key], full)
        if is_seed_key(str(key)):
            check_seed_value(kwargs[key], full)
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
            raise ConfigError(f"override '{item[:SHOWN_CHARS]}' is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override '{item[:SHOWN_CHARS]}' has an empty key")
        try:
            value = parse_yaml(raw) if raw != "" else ""
        except (yaml.YAMLError, RecursionError):  # not YAML (or refused, see _StrictLoader): the text itself
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item[:SHOWN_CHARS]}' conflicts with an earlier override")
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


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses what a config never needs and a hostile file uses.

    Refused, each as a :class:`yaml.MarkedYAMLError` carrying the line: a key given twice in one
    mapping (the later value used to win silently), aliases (``*name``: the "billion laughs"
    document expands a few lines into gigabytes), nesting deeper than :data:`MAX_YAML_DEPTH`
    (would end in ``RecursionError``) and integers too long for ``int()`` (``ValueError``).
    """

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, f"uses the alias *{event.anchor[:SHOWN_CHARS]}; YAML aliases "
                            "are not supported (write the value out)", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, "nested more than "
                                                              f"{MAX_YAML_DEPTH} levels deep",
                                                  event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: {...}``: merged keys may be overridden
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {show(key)} (first given on line {first + 1})",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # CPython's limit on the digits of an int
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value)} characters "
                            "is too large", node.start_mark) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` with the refusals of :class:`_StrictLoader` (duplicate keys, aliases, ...)."""
    loader = _StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> dict:
    """A YAML mapping from ``path``; any problem is one :class:`DataError` line naming the file (and line)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"config file not found: {path}")
    note_input(path)  # a task spec read while a command runs is one of its inputs
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"config file {path} cannot be read: {e.strerror or e}") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise DataError(f"config file {path} line {line}: not valid UTF-8 "
                        f"({e.reason}, byte 0x{raw[e.start]:02x})") from None
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None)
        why = f": {' '.join(str(problem).split())[:2 * SHOWN_CHARS]}" if problem else ""
        raise DataError(f"config file {path} is not valid YAML{where}{why}") from None
    except RecursionError:  # not expected past MAX_YAML_DEPTH, but never a traceback
        raise DataError(f"config file {path} is not valid YAML: nested too deeply") from None
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


# ------------------------------------------------------------------ schemas (pydantic)
# The structured inputs that are not config dataclasses (a task spec file) are read through strict pydantic
# schemas; why pydantic there and not for the config dataclasses: docs/bad-input.md.


class Schema(BaseModel):
    """A strict record: no coercion between types, no unknown key, frozen once read."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def _phrase(err: dict, schema: type[BaseModel]) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"is not a known key (valid: {', '.join(sorted(schema.model_fields))})"
    if kind == "missing":
        return "is missing"
    if kind == "literal_error":
        choices = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return f"must be one of {', '.join(choices)}"
    simple = {"string_type": "must be a string", "bool_type": "must be true or false",
              "int_type": "must be an integer", "float_type": "must be a number",
              "dict_type": "must be a "
                           "mapping", "model_type": "must be a mapping", "list_type": "must be a list",
              "string_too_short": "must not be empty"}
    if kind in simple:
        return simple[kind]
    for bound, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if bound in ctx:
            return f"must be {sign} {ctx[bound]}"
    return str(err.get("msg", "is not valid")).removeprefix("Value error, ").lower()


def validate(schema: type[BaseModel], data: Any, where: str | Callable[[tuple], str]) -> Any:
    """``schema.model_validate(data)``, or one ConfigError line: ``{where}: '{key}' {what is wrong}, got
    {value}``.

    ``where`` is a prefix, or a function of the error's location (a tuple of keys and indices) giving it."""
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        loc = tuple(err["loc"])
        prefix = where(loc) if callable(where) else where
        key = ".".join(str(k) for k in loc if isinstance(k, str)) or (str(loc[-1]) if loc else "")
        got = "" if err["type"] in ("missing", "extra_forbidden") else f", got {show(err.get('input'))}"
        raise ConfigError(f"{prefix}: '{key}' {_phrase(err, schema)}{got}") from None
