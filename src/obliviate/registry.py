"""One registry type for everything found by name: methods, tasks, recipes, attacks, benchmarks.

A :class:`Registry` is a dict of ``name -> entry`` filled by decorators at the definition site
(lm-eval's lesson). With ``package=``, the first look-up imports every public module of that
package once, so adding an entry is adding one file. An unknown name is one
:class:`~obliviate.errors.ConfigError` line naming it, the closest known name and all known names.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from obliviate.errors import ConfigError


class Registry(dict):
    """``name -> entry``; ``kind`` names the entries in messages ("method", "task", ...)."""

    def __init__(self, kind: str, package: str | None = None, error: type[Exception] = ConfigError):
        super().__init__()
        self.kind = kind
        self.package = package
        self.error = error
        self._scanned: tuple[str, ...] | None = None

    def add(self, name: str, entry: Any) -> Any:
        """Register ``entry`` under ``name`` (the same entry twice is a no-op; another one is an error)."""
        if dict.__contains__(self, name) and dict.__getitem__(self, name) is not entry:
            raise RuntimeError(f"{self.kind} {name!r} registered twice")
        dict.__setitem__(self, name, entry)
        return entry

    def register(self, name: str, wrap: Callable[[Any], Any] | None = None) -> Callable:
        """Decorator: ``@REG.register("name")`` registers the decorated object (``wrap(obj)`` if given)
        and returns the object itself."""

        def deco(obj):
            self.add(name, obj if wrap is None else wrap(obj))
            return obj

        return deco

    def load_all(self) -> None:
        """Import every public module of ``package`` (once per package path, so a folder added to the
        package's ``__path__`` is read too), so that their decorators have run."""
        if self.package is None:
            return
        pkg = importlib.import_module(self.package)
        if self._scanned == tuple(pkg.__path__):
            return
        self._scanned = tuple(pkg.__path__)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{self.package}.{mod.name}")

    def names(self) -> list[str]:
        self.load_all()
        return sorted(self)

    def get(self, name: str, default: Any = None) -> Any:  # dict.get with discovery
        self.load_all()
        return dict.get(self, name, default)

    def lookup(self, name: str) -> Any:
        """The entry ``name``, or one error line naming it and what is known."""
        self.load_all()
        if not dict.__contains__(self, name):
            raise self.unknown(name)
        return dict.__getitem__(self, name)

    def unknown(self, name: str, known: list[str] | None = None) -> Exception:
        known = sorted(self) if known is None else known
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return self.error(f"unknown {self.kind} {name!r}{hint}; known: {', '.join(known)}")

    def __contains__(self, name: object) -> bool:
        self.load_all()
        return dict.__contains__(self, name)

    def __getitem__(self, name: str) -> Any:
        self.load_all()
        return dict.__getitem__(self, name)

    def __iter__(self):
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def items(self):
        self.load_all()
        return dict.items(self)

    def values(self):
        self.load_all()
        return dict.values(self)

    def keys(self):
        self.load_all()
        return dict.keys(self)
