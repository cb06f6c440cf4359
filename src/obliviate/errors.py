"""User-facing errors.

Anything a user can cause (a bad config key, a missing file, a layer index out of
range) raises :class:`ObliviateError` with a one-line message that names the bad
key, value or file. The CLI prints that line and exits with status 2, before any
``results.json`` is written.

A message that tells the user what to set names it as the user gives it: the command line's option
(``--allow-hub``) inside :func:`command_line` (the CLI's ``main`` runs every command in it), the Python
argument (``allow_hub=True``) otherwise (:func:`setting`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_COMMAND_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar("obliviate_command_line", default=False)


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Within it, :func:`setting` names the command line's options (the CLI's ``main`` runs each command in
    it)."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def setting(api: str | None, cli: str | None) -> str | None:
    """How a message names a setting: ``cli`` (the command line's option, e.g. ``--allow-hub``) inside
    :func:`command_line`, else ``api`` (the Python argument, e.g. ``allow_hub=True``); None where that side
    has no such setting (the message then leaves it out)."""
    return cli if _COMMAND_LINE.get() else api


class ObliviateError(Exception):
    """An error caused by user input; its message is shown as one line."""


class ConfigError(ObliviateError):
    """Unknown config key, wrong type, or invalid value."""


class DataError(ObliviateError):
    """Missing or malformed data file."""


class ModelError(ObliviateError):
    """A model or tokenizer that cannot be used as asked (e.g. no pad token, layer out of range)."""


class InvalidResult(ObliviateError):
    """A run whose numbers would be meaningless (e.g. a model whose logits are NaN or infinite): the CLI
    writes ``results.json`` with ``status: invalid`` and this error instead of any score, and exits 2."""
