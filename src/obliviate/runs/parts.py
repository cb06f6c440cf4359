"""The one resumable part store: a finished piece of a long run, kept as JSON beside the run, so an
interrupted run resumes into the same directory and redoes only what is missing or was made otherwise.

A part is a file ``{"key": ..., "result": ..., "seconds": ...}``: :func:`cached_part` reuses it while the
``key`` (the settings that made it) matches. :class:`PartStore` is a directory of them that belongs to one
run config and refuses parts of another.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Callable

import torch

from obliviate.errors import ConfigError
from obliviate.runs.results import atomic_write_json


def kept_part(path, key) -> dict | None:
    """The result stored in the part ``path`` when it was made with ``key`` (as :func:`cached_part` stores
    it), else None: what a resumed run may reuse without computing it."""
    path = Path(path)
    if not path.exists():
        return None
    saved = json.loads(path.read_text())
    return saved.get("result") if saved.get("key") == json.loads(json.dumps(key)) else None


def cached_part(path, key, fn: Callable[[], dict]) -> tuple[dict, float]:
    """``fn()``'s result, stored in the JSON file ``path`` with the ``key`` (settings) that made it and
    reused while the key matches (a part made with other settings is computed again and replaced).

    Returns (the result as read back from the file, the seconds it took when it was computed): a
    rerun sees the same JSON-clean values as the first run.
    """
    path = Path(path)
    key = json.loads(json.dumps(key))
    if path.exists():
        saved = json.loads(path.read_text())
        # a part stored before parts carried a key: the result itself
        if "result" not in saved and key is None:
            saved = {"key": None, "result": {k: v for k, v in saved.items() if k != "seconds"},
                     "seconds": saved.get("seconds")}
        if saved.get("key") == key and "result" in saved:
            return saved["result"], saved.get("seconds", 0.0)
    t = time.time()
    result = fn()
    atomic_write_json(path, {"key": key, "result": result, "seconds": time.time() - t})
    saved = json.loads(path.read_text())
    return saved["result"], saved["seconds"]


def cached_parts(jobs: list[tuple], *, parallel: bool = False,
                 in_child: Callable[[], None] | None = None) -> list:
    """:func:`cached_part` of every ``(path, key, fn)`` of ``jobs``, in order: a list of (result, seconds).

    With ``parallel`` (the caller asks where :func:`obliviate.train.distributed.two_at_a_time` says it can),
    the parts not yet stored are computed two at a time: a forked child process and this one each take the
    next part nobody has taken, each on one torch thread. On 2 cores this nearly halves the wall time of tiny
    models, whose small matrix products do not use a second thread; and since every part runs on one thread in
    either process, its result does not depend on which process made it or on what else runs (a run with
    ``parallel`` off uses the default threads). ``in_child()`` runs first in the child (e.g. to hide its
    progress bars). A part that failed in the child is computed again here, where its error is raised; the
    child is stopped when this process fails. Each ``fn`` must write nothing but its return value and files of
    its own (the child's changes to this process's memory are lost)."""
    if not parallel or "fork" not in mp.get_all_start_methods():
        return [cached_part(*job) for job in jobs]
    todo = [i for i, (path, key, _) in enumerate(jobs) if kept_part(path, key) is None]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if len(todo) > 1:
            ctx = mp.get_context("fork")
            taken = ctx.Value("i", 0)

            def work() -> None:
                while True:
                    with taken.get_lock():
                        n = taken.value
                        taken.value += 1
                    if n >= len(todo):
                        return
                    cached_part(*jobs[todo[n]])

            def child() -> None:
                torch.set_num_threads(1)
                if in_child is not None:
                    in_child()
                try:
                    work()
                except BaseException:  # left for this process to compute again, and to raise
                    os._exit(1)

            proc = ctx.Process(target=child, daemon=True)
            proc.start()
            try:
                work()
            except BaseException:
                proc.terminate()
                proc.join()
                raise
            proc.join()
        return [cached_part(*job) for job in jobs]
    finally:
        torch.set_num_threads(threads)


class PartStore:
    """A run's parts, one file per name in ``directory``; ``get(name, fn)`` runs ``fn`` only once.

    With ``config``, the store belongs to that run config (recorded in ``config.json``) and refuses a
    directory holding parts of another one (they would mix two runs). Each part's compute time goes to
    :attr:`timings` (never into the part's result).
    """

    def __init__(self, directory, config: dict | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.timings: dict[str, float | None] = {}
        if config is not None:
            self.check_config(config)

    def check_config(self, config: dict) -> None:
        """Refuse parts made with another config; record ``config`` otherwise (parts stored before configs
        were recorded are taken as they are)."""
        config = json.loads(json.dumps(config))
        path = self.dir / "config.json"
        if path.exists():
            saved = json.loads(path.read_text())
            diff = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
            if diff:
                raise ConfigError(f"{self.dir.parent} holds parts of a run with another config (differs in: "
                                  f"{', '.join(diff)}); use another --out, "
                                  f"or delete {self.dir} to start afresh")
        atomic_write_json(path, config)

    def path(self, name: str, suffix: str = ".json") -> Path:
        """The file of part ``name`` (``/``, ``@`` and ``+`` spelled out); other suffixes for a part's
        arrays."""
        return self.dir / (name.replace("/", "__").replace("@", "_at_").replace("+", "_") + suffix)

    def get(self, name: str, fn: Callable[[], dict], key=None) -> dict:
        """Part ``name``: ``fn()``'s result as stored (:func:`cached_part`, redone when ``key`` changed)."""
        result, self.timings[name] = cached_part(self.path(name), key, fn)
        return result

    def get_many(self, parts: dict[str, Callable[[], dict]], *, parallel: bool = False,
                 in_child: Callable[[], None] | None = None) -> dict[str, dict]:
        """:meth:`get` of every ``{name: fn}``, two at a time with ``parallel`` (:func:`cached_parts`)."""
        names = list(parts)
        done = cached_parts([(self.path(n), None, parts[n]) for n in names], parallel=parallel,
                            in_child=in_child)
        for n, (_, seconds) in zip(names, done):
            self.timings[n] = seconds
        return {n: r for n, (r, _) in zip(names, done)}
