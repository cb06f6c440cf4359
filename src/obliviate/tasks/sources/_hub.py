"""Optional fallback: read a benchmark from the Hugging Face hub with ``datasets``.

Only used when a loader is called with ``allow_hub=True`` (the command line's ``--allow-hub``) and the local
file is missing. Each read says on stderr, in one line, what is read, from where (``$HF_ENDPOINT``, default
https://huggingface.co) and into which cache (``datasets``' cache, ``$HF_DATASETS_CACHE`` / ``$HF_HOME``);
with ``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1`` ``datasets`` reads its cache only. ``datasets`` is
imported here, never at package import time.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from obliviate.tasks.sources._io import MissingFile


def hub_line(repo: str, config: str | None, split: str, missing: str) -> str:
    """The line that names a hub read: ``<missing> not found: reading <repo> (<config>, split <split>) from
    <endpoint> into <cache>`` (or ``from the local datasets cache <cache> (offline)``)."""
    import datasets
    from huggingface_hub import constants

    what = f"{missing} not found: reading {repo} ({config or 'default'}, split {split})"
    cache = datasets.config.HF_DATASETS_CACHE
    if datasets.config.HF_HUB_OFFLINE:
        return f"{what} from the local datasets cache {cache} (offline)"
    return f"{what} from {constants.ENDPOINT} into {cache}"


def hub_records(repo: str, config: str | None, split: str, missing: str) -> Iterator[tuple[str, dict]]:
    """Yield ``(where, record)`` for each row of ``repo`` / ``config`` / ``split``.

    ``missing`` is the local path that was not found. When the hub cannot give the rows either (no
    ``datasets`` package, no network, offline without a cached copy, no such config) the first ``next`` raises
    :class:`~obliviate.tasks.sources._io.MissingFile` naming ``missing`` and the hub's reason: to a provider,
    the file is then absent, as it is without the hub, and a file it can do without stays optional.
    """
    try:
        import datasets
    except ImportError:
        reason = "the hub fallback needs the 'datasets' package (pip install datasets)"
        raise MissingFile(f"{missing} not found, and {reason}", missing, reason) from None
    print(f"obliviate: {hub_line(repo, config, split, missing)}", file=sys.stderr)
    try:
        ds = datasets.load_dataset(repo, config, split=split)
    except Exception as e:  # network, offline, unknown config, ...: one line for the user
        reason = (f"loading {repo} ({config or 'default'}, split {split}) failed: "
                  f"{' '.join(str(e).split())[:300]}")
        raise MissingFile(f"{missing} not found, and {reason}", missing, reason) from e
    name = f"{repo}:{config or 'default'}:{split}"
    for i, row in enumerate(ds, 1):
        yield f"{name} record {i}", dict(row)


def optional_hub_records(repo: str, config: str | None, split: str, missing) -> list[tuple[str, dict]] | None:
    """The rows of an optional file's hub copy (:func:`hub_records`), or None where the hub cannot give them
    (its :class:`~obliviate.tasks.sources._io.MissingFile`: offline, no such config, no ``datasets``): an
    optional file is as absent with ``allow_hub`` as without it."""
    try:
        return list(hub_records(repo, config, split, str(missing)))
    except MissingFile:
        return None
