"""A component written in one file, as a user writes one: imported from its own path, registered by its decorator,
and removed from its registry afterwards (the one-file tests of attacks and metrics)."""

from __future__ import annotations

import importlib.util
import textwrap


def registered_from_file(tmp_path, name: str, source: str, registry):
    """Write ``source`` to ``tmp_path/<name>.py``, import it, yield ``registry[name]``, then remove it: a fixture's
    body (``yield from registered_from_file(...)``)."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(f"{name}_one_file", path)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    yield registry[name]
    registry.remove(name)
