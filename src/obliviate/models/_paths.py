"""Small helpers shared by the loaders: telling local paths from hub ids, one-line errors."""

from __future__ import annotations

import os


def looks_like_path(s: str) -> bool:
    """True for strings that can only be a filesystem path, never a hub id ("org/name")."""
    return (
        s.startswith((".", "/", "~"))
        or s.count("/") > 1
        or s.endswith("/")
        or (os.sep != "/" and os.sep in s)
    )


def one_line(e: BaseException) -> str:
    """An exception's message squeezed onto one line (and cut to 300 characters)."""
    return " ".join(str(e).split())[:300]
