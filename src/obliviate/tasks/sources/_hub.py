"""Optional fallback: read a benchmark from the Hugging Face hub with ``datasets``.

Only used when a loader is called with ``allow_hub=True`` and the local file is
missing. ``datasets`` is imported here, never at package import time.
"""

from __future__ import annotations

from collections.abc import Iterator

from obliviate.errors import DataError


def hub_records(repo: str, config: str | None, split: str, missing: str) -> Iterator[tuple[str, dict]]:
    """Yield ``(where, record)`` for each row of ``repo`` / ``config`` / ``split``.

    ``missing`` is the local path that was not found (named in the error if the hub fails too).
    """
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{missing} not found and the hub fallback needs the 'datasets' package (pip install datasets)"
        ) from None
    try:
        ds = datasets.load_dataset(repo, config, split=split)
    except Exception as e:  # network, unknown config, ...: one line for the user
        msg = " ".join(str(e).split())[:300]
        raise DataError(f"{missing} not found, and loading {repo} ({config}, split {split}) from the hub failed: {msg}") from e
    name = f"{repo}:{config or 'default'}:{split}"
    for i, row in enumerate(ds):
        yield f"{name} record {i}", dict(row)
