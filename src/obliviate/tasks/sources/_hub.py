"""Optional fallback: read a benchmark from the Hugging Face hub with ``datasets``.

Only used when a loader is called with ``allow_hub=True`` (the command line's ``--allow-hub``) and the local file
is missing. Each read says on stderr, in one line, what is read, from where (``$HF_ENDPOINT``, default
https://huggingface.co) and into which cache (``datasets``' cache, ``$HF_DATASETS_CACHE`` / ``$HF_HOME``); with
``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1`` ``datasets`` reads its cache only. ``datasets`` is imported here,
never at package import time.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from obliviate.errors import DataError


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

    ``missing`` is the local path that was not found (named in the error if the hub fails too).
    """
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{missing} not found and the hub fallback needs the 'datasets' package (pip install datasets)"
        ) from None
    print(f"obliviate: {hub_line(repo, config, split, missing)}", file=sys.stderr)
    try:
        ds = datasets.load_dataset(repo, config, split=split)
    except Exception as e:  # network, unknown config, ...: one line for the user
        msg = " ".join(str(e).split())[:300]
        raise DataError(f"{missing} not found, and loading {repo} ({config}, split {split}) from the hub failed: "
                        f"{msg}") from e
    name = f"{repo}:{config or 'default'}:{split}"
    for i, row in enumerate(ds):
        yield f"{name} record {i}", dict(row)
