"""One registry type for everything found by name: methods, tasks, recipes, attacks, metrics, benchmarks.

A :class:`Registry` holds ``name -> entry``, filled by decorators at the definition site (lm-eval's lesson).
With ``package=``, the first look-up imports every public module of that package once, so adding an entry is
adding one file. An unknown name is one :class:`~obliviate.errors.ConfigError` line naming it, the closest
known name and all known names.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from obliviate.errors import ConfigError


class Registry(Mapping):
    """``name -> entry``, read as a mapping (``REG[name]``, ``name in REG``, ``REG.items()``...), each
    look-up after the package's modules are imported; ``kind`` names the entries in messages ("method",
    "task", ...)."""

    def __init__(self, kind: str, package: str | None = None, error: type[Exception] = ConfigError):
        self.kind = kind
        self.package = package
        self.error = error
        self._entries: dict[str, Any] = {}
        self._scanned: tuple[str, ...] | None = None

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} registered so far)"

    def add(self, name: str, entry: Any) -> Any:
        """Register ``entry`` under ``name`` (the same entry twice is a no-op; another one is an error)."""
        if self._entries.get(name, entry) is not entry:
            raise RuntimeError(f"{self.kind} {name!r} registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str, wrap: Callable[[Any], Any] | None = None) -> Callable:
        """Decorator: ``@REG.register("name")`` registers the decorated object (``wrap(obj)`` if given)
        and returns the object itself."""

        def deco(obj):
            self.add(name, obj if wrap is None else wrap(obj))
            return obj

        return deco

    def registered(self, name: str) -> Any | None:
        """The entry registered so far under ``name``, or None, without importing the package (for a decorator
        that runs while the package is being imported)."""
        return self._entries.get(name)

    def remove(self, name: str) -> Any | None:
        """Unregister ``name`` (a test's own entry); its entry, or None when there was none."""
        return self._entries.pop(name, None)

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
        return sorted(self)

    def lookup(self, name: str) -> Any:
        """The entry ``name``, or one error line naming it and what is known."""
        try:
            return self[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str, known: list[str] | None = None) -> Exception:
        known = self.names() if known is None else known
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return self.error(f"unknown {self.kind} {name!r}{hint}; known: {', '.join(known)}")

    def __getitem__(self, name: str) -> Any:
        self.load_all()
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load_all()
        return len(self._entries)
