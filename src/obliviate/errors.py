"""User-facing errors.

Anything a user can cause (a bad config key, a missing file, a layer index out of
range) raises :class:`ObliviateError` with a one-line message that names the bad
key, value or file. The CLI prints that line and exits with status 2, before any
``results.json`` is written.
"""


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
