"""Pydantic schemas for the structured inputs that are not config dataclasses (a task spec file), and the one
line a schema error becomes.

A :class:`Schema` is strict (a string is not a bool, ``7`` is not a string) and refuses unknown keys;
:func:`validate` turns pydantic's first error into one :class:`~obliviate.errors.ConfigError` line naming
where the value is, its key and the value itself: ``task spec key 'forget': forget.jsonl: 'kind' must be one of
qa, mcq, text, got 'essay'``. Why pydantic here and not for the config dataclasses: docs/bad-input.md.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from obliviate.config import show
from obliviate.errors import ConfigError


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
              "dict_type": "must be a mapping", "model_type": "must be a mapping", "list_type": "must be a list",
              "string_too_short": "must not be empty"}
    if kind in simple:
        return simple[kind]
    for bound, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if bound in ctx:
            return f"must be {sign} {ctx[bound]}"
    return str(err.get("msg", "is not valid")).removeprefix("Value error, ").lower()


def validate(schema: type[BaseModel], data: Any, where: str | Callable[[tuple], str]) -> Any:
    """``schema.model_validate(data)``, or one ConfigError line: ``{where}: '{key}' {what is wrong}, got {value}``.

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
