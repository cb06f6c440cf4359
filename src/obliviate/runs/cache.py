"""The cache of the controls, shared by every run directory (issue #56): ``attack`` and ``compare`` build the
same negative control, positive controls and attacks on the base model for every model judged against that
base; this store keeps each one once, by content (the SHA-256 of what made it: :func:`model_digest`,
:func:`task_fingerprint`, the settings, :func:`recipe`), under :func:`cache_root`.

Entries are built in a staging folder and renamed into place whole; every read checks them against their
hashes. What a key holds, the staging folders' locks, ``--no-cache`` and clearing it: docs/evaluation.md, "The
cache of the controls".
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Callable

import torch

from obliviate.config import to_dict
from obliviate.errors import ObliviateError
from obliviate.runs.results import atomic_write_json, stored_form, task_digest, without_display
from obliviate.train.distributed import world_size
from obliviate.utils import cache_dir, file_sha256, replace_dir, staging_dir

try:
    import fcntl
except ImportError:  # Windows: a staging folder's builder is not known, so none is removed but by hand
    fcntl = None

log = logging.getLogger(__name__)

FORMAT = 1
"""The layout of an entry; part of every key, so a new layout never reads an old one."""
ENTRY = "entry.json"
OWNER = ".owner"
"""The file of a staging folder its builder holds locked (``fcntl.flock``) while it builds; not one of the
entry's files (removed once the entry is in place)."""
STAGING = re.compile(r"^\.(?P<entry>[^.]+)\.(?P<host>.+)\.(?P<pid>\d+)\.[^.]+\.tmp$")
"""A staging folder's name: the entry it builds, then the host and process building it."""
STALE_STAGING_SECONDS = 2 * 24 * 3600
"""A staging folder without an owner file (left by an obliviate before the owner file) this old, or a folder
of the instant before it gets its owner (``.new``), is left by a run killed while building: removed by the
next build."""
LIBRARIES = ("torch", "transformers", "tokenizers", "peft")
"""The libraries whose versions are part of every key (:func:`runtime`; None where one is not installed): a
new release may compute another float's last bits, or tokenize a text otherwise."""
LOCATION_META = ("files", "directory", "data", "notes", "missing", "inputs")
"""Keys of ``Task.meta`` that say where the task's data came from (paths, and lines naming them; ``inputs``:
the files read, with their hashes, :data:`obliviate.tasks.base.INPUTS`), not what it is: left out of
:func:`task_fingerprint`, so the same data read from another place finds the same entries."""


def cache_root() -> Path:
    """The folder of the controls' entries: ``cache_dir() / "controls"``."""
    return cache_dir() / "controls"


@functools.lru_cache(maxsize=1)
def recipe() -> dict:
    """The code that builds and scores a control: the package's version and a SHA-256 of its source files (a
    version bump or a local edit of any module gives new entries; reading the same version from another place
    does not)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    try:
        version = importlib.metadata.version("obliviate")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"obliviate": version, "source": h.hexdigest()}


def _plain(obj):
    """``obj`` as JSON-able data for a key: dataclasses as dicts, tuples as lists, anything else by its
    text."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return _plain(to_dict(obj))
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_plain(v) for v in (sorted(obj, key=str) if isinstance(obj, set) else obj)]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return str(obj)


def settings_key(obj) -> dict:
    """A config (a dataclass or a dict) as part of a key: JSON-able, without the keys that change only what a
    run shows (:func:`~obliviate.runs.results.without_display`: the progress bars and their labels)."""
    return without_display(_plain(obj))


def task_fingerprint(task) -> str:
    """A SHA-256 of everything of ``task`` that a control or an attack reads: its items
    (:func:`obliviate.runs.results.task_digest`), the evaluation sets' settings, the prompt format, the halves
    and groups, the probe's data, the preferred answers, the oracle's data, the pretraining world and ``meta``
    but its :data:`LOCATION_META`."""
    h = hashlib.sha256(task_digest(task).encode())
    rest = {"name": task.name, "prompt": task.prompt,
            "evals": [{f.name: getattr(es, f.name) for f in fields(es) if f.name != "items"}
                      for es in task.evals],
            "halves": task.halves, "groups": task.groups, "probe": task.probe,
            "idk": None if task.idk is None else [type(task.idk).__name__, list(task.idk)],
            "oracle_data": None if task.oracle_data is None else [task.oracle_data.qa, task.oracle_data.docs],
            "pretrain": task.pretrain, "meta": {k: v for k, v in task.meta.items() if k not in LOCATION_META}}
    h.update(json.dumps(_plain(rest), sort_keys=True).encode())
    return h.hexdigest()


def _config_dict(model) -> dict:
    cfg = getattr(model, "config", None)
    if cfg is None or not hasattr(cfg, "to_dict"):
        return {}
    d = cfg.to_dict()
    keep = {k: v for k,
            v in d.items() if not k.startswith("_") and k not in ("name_or_path", "transformers_version")}
    keep["attn_implementation"] = getattr(cfg, "_attn_implementation", None)
    return keep


def model_digest(model) -> str:
    """A SHA-256 of ``model`` as loaded: its config (but its path and library version) and every tensor of its
    state dict (name, dtype, shape, bytes) and the device type it runs on. The same weights read from another
    file, path or time give the same digest; another dtype or a merged adapter gives another."""
    h = hashlib.sha256(json.dumps(_plain(_config_dict(model)), sort_keys=True).encode())
    device = None
    for name, t in sorted(model.state_dict().items()):
        t = t.detach()
        device = device or t.device.type
        h.update(json.dumps([name, str(t.dtype), list(t.shape)]).encode())
        if t.device.type != "meta" and t.numel():
            h.update(t.reshape(-1).contiguous().view(torch.uint8).cpu().numpy().data)
    h.update(str(device).encode())
    return h.hexdigest()


def tokenizer_digest(tokenizer) -> str:
    """A SHA-256 of what ``tokenizer`` does to a text: its whole serialisation (a fast tokenizer's; else its
    vocabulary), its special tokens, padding side and chat template."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    parts = {"class": type(tokenizer).__name__,
             "tokenizer": backend.to_str() if backend is not None else sorted(tokenizer.get_vocab().items()),
             "special": getattr(tokenizer, "special_tokens_map", None),
             "pad": getattr(tokenizer, "pad_token_id", None),
             "side": getattr(tokenizer, "padding_side", None),
             "chat": getattr(tokenizer, "chat_template", None)}
    return hashlib.sha256(json.dumps(_plain(parts), sort_keys=True).encode()).hexdigest()


@functools.lru_cache(maxsize=1)
def library_versions() -> dict:
    """``{name: version or None}`` of :data:`LIBRARIES` (torch's as it says itself, its local build tag
    included)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return {**out, "torch": torch.__version__}


def runtime() -> dict:
    """What else changes a float's last bits: the versions of :data:`LIBRARIES`, the threads torch runs on now
    (a comparison makes its parts on one thread each, a plain run on all) and, where this process runs on
    CUDA, the GPU's name and CUDA's version (another GPU runs other kernels)."""
    out = {**library_versions(), "threads": torch.get_num_threads()}
    # never initialised here (a forked child cannot)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = {"device": torch.cuda.get_device_name(), "version": torch.version.cuda}
    return out


def key_digest(kind: str, key: dict) -> str:
    """The SHA-256 naming the entry of ``kind`` made with ``key`` (with :data:`FORMAT`, :func:`recipe` and
    :func:`runtime`)."""
    blob = json.dumps({"format": FORMAT, "kind": kind, "recipe": recipe(), "runtime": runtime(),
                       "key": _plain(key)},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _files(folder: Path) -> dict[str, str]:
    """``{relative path: SHA-256}`` of every file under ``folder`` but the entry's own ``entry.json`` and the
    builder's :data:`OWNER`."""
    return {str(p.relative_to(folder)): file_sha256(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder) not in (Path(ENTRY), Path(OWNER))}


def _held(path: Path) -> bool | None:
    """Whether another open file holds ``path`` locked (``fcntl.flock``): True, False, or None where this file
    system (or platform) cannot tell."""
    if fcntl is None:
        return None
    try:
        f = open(path, "rb")
    except OSError:
        return None
    with f:  # closing lets it go again
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            return True if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) else None
        return False


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a pid reused by another process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def _owner_gone(folder: Path) -> bool:
    """Whether the run that made the staging folder ``folder`` is gone: its owner file is no longer locked
    (else, on a file system without locks, its pid runs no more on this host); never this process's own
    folders."""
    m = STAGING.match(folder.name)
    here = socket.gethostname()
    if m is not None and m["host"] == here and int(m["pid"]) == os.getpid():
        return False  # this process's (an entry built inside the build of another)
    if not (folder / OWNER).exists():  # made by an obliviate before owners: by its age
        try:
            return time.time() - folder.stat().st_mtime > STALE_STAGING_SECONDS
        except OSError:
            return False
    held = _held(folder / OWNER)
    if held is not None:
        return not held
    return fcntl is not None and m is not None and m["host"] == here and not _alive(int(m["pid"]))


class Hit(dict):
    """What :meth:`ControlCache.get` returns: the entry's ``result`` (a dict, as stored: JSON-clean), with
    ``path`` (the entry's folder) and ``reused`` (found, not built here)."""

    def __init__(self, result: dict, path: Path, reused: bool):
        super().__init__(result)
        self.path, self.reused = path, reused


class ControlCache:
    """Entries under ``root`` (default :func:`cache_root`), module docstring. :meth:`get` finds or builds
    one."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_root()

    def __eq__(self, other) -> bool:  # one cache is one folder
        return isinstance(other, ControlCache) and self.root == other.root

    def __hash__(self) -> int:
        return hash(self.root)

    def path(self, kind: str, key: dict) -> Path:
        """The folder of the entry of ``kind`` made with ``key``."""
        return self.root / f"{kind}-{key_digest(kind, key)[:32]}"

    def _read(self, path: Path, kind: str, key: dict) -> tuple[dict | None, str | None]:
        """``(result, None)`` for a sound entry at ``path``; ``(None, why)`` for a corrupt one; ``(None,
        None)`` where there is none."""
        if not path.exists():
            return None, None
        try:
            saved = json.loads((path / ENTRY).read_text())
        except (OSError, ValueError) as e:
            return None, f"its {ENTRY} cannot be read ({type(e).__name__})"
        if not isinstance(saved,
                          dict) or saved.get("kind") != kind or saved.get("key") != stored_form(_plain(key)):
            return None, f"its {ENTRY} holds another key"
        for rel, digest in (saved.get("files") or {}).items():
            f = path / rel
            if not f.is_file():
                return None, f"{rel} is missing"
            if file_sha256(f) != digest:
                return None, f"{rel} does not match its SHA-256"
        if not isinstance(saved.get("result"), dict):
            return None, f"its {ENTRY} holds no result"
        return saved["result"], None

    def _discard(self, path: Path) -> None:
        """Move ``path`` aside (one rename, so no reader sees it half removed), then delete it."""
        aside = path.with_name(f".{path.name}.removed-{os.getpid()}-{time.time_ns()}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:  # another run removed it first
            return
        shutil.rmtree(aside, ignore_errors=True)

    def _sweep(self) -> None:
        """Remove the staging folders of runs killed while building (:func:`_owner_gone`); a build still
        running, however long, keeps its own."""
        for p in [*self.root.glob(".*.tmp"), *self.root.glob(".*.new")]:
            try:  # a .new one: killed in the instant between making it and taking it
                if p.is_dir() and (_owner_gone(p) if p.suffix == ".tmp"
                                   else time.time() - p.stat().st_mtime > STALE_STAGING_SECONDS):
                    self._discard(p)
            except OSError:  # another user's, or gone meanwhile: left alone
                continue

    def _stage(self, name: str) -> tuple[Path, object]:
        """A new staging folder for the entry ``name``, with its :data:`OWNER` file held locked by the open
        file returned (kept open until the build ends). Made as ``.new`` and renamed ``.tmp`` once held, so a
        sweep never sees a staging folder whose builder has not taken it yet."""
        new = Path(tempfile.mkdtemp(prefix=f".{name}.{socket.gethostname()}.{os.getpid()}.", suffix=".new",
                                    dir=self.root))
        owner = open(new / OWNER, "w")
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # a file system without locks: the pid in the name says who builds it
                    pass
            staged = new.with_suffix(".tmp")
            os.rename(new, staged)
        except BaseException:
            owner.close()
            shutil.rmtree(new, ignore_errors=True)
            raise
        return staged, owner

    def get(self, kind: str, key: dict, build: Callable[[Path], dict], *, what: str) -> Hit:
        """The entry of ``kind`` made with ``key``: read (its files checked), else ``build(folder)`` (which
        writes its files into ``folder`` and returns the result, a JSON-able dict) staged and renamed into
        place. ``what`` names the entry in the lines said: reusing it, or finding it corrupt."""
        path = self.path(kind, key)
        result, corrupt = self._read(path, kind, key)
        if result is not None:
            log.info(f"{what}: reused from the cache ({path})")
            return Hit(result, path, True)
        if corrupt:
            log.warning(f"{what}: the cache entry {path} is corrupt ({corrupt}); rebuilding it")
            self._discard(path)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._sweep()
            staged, owner = self._stage(path.name)
        except OSError as e:
            raise ObliviateError(f"cannot write the cache of the controls {self.root}: {e.strerror or e} "
                                 "(set $OBLIVIATE_CACHE to a writable folder, or give --no-cache)") from None
        try:
            result = build(staged)
            atomic_write_json(staged / ENTRY,
                              {"kind": kind, "key": _plain(key), "format": FORMAT, "recipe": recipe(),
                                               "result": result, "files": _files(staged)})
            try:
                os.rename(staged, path)
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                saved, _ = self._read(path, kind, key)
                if saved is not None:  # another run built it at the same time: the first one in place is kept
                    return Hit(saved, path, False)
                self._discard(path)  # what another run renamed there is unsound: ours wins
                os.rename(staged, path)
            with contextlib.suppress(OSError):
                (path / OWNER).unlink()
            # the hashes just written are trusted; a later read checks
            return Hit(stored_form(result), path, False)
        finally:
            if staged.exists():
                self._discard(staged)
            owner.close()


def place_model(src: Path, dst: str | Path) -> Path:
    """Put the model folder ``src`` of an entry at ``dst`` (a run's): each file hard-linked where the file
    system allows (no second copy on disk; a file changed there is found by the entry's next read), else
    copied, into a folder that replaces ``dst`` whole (:func:`obliviate.utils.replace_dir`). Left as it is
    where ``dst`` already holds ``src``'s files."""
    src, dst = Path(src), Path(dst)
    names = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    if dst.is_dir() and sorted(p.relative_to(dst) for p in dst.rglob("*") if p.is_file()) == names and all(
            os.path.samefile(src / n, dst / n) for n in names):
        return dst
    staged = staging_dir(dst)
    try:
        for n in names:
            (staged / n).parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src / n, staged / n)
            except OSError:  # another file system, or one without links
                shutil.copy2(src / n, staged / n)
        return replace_dir(staged, dst)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def control_cache(enabled: bool = True) -> ControlCache | None:
    """The cache a run uses: :class:`ControlCache` at :func:`cache_root`, or None where ``enabled`` is
    false (``cache= false``, ``--no-cache``) or the run spans several processes (each would race to build
    its own)."""
    if not enabled:
        return None
    if world_size() > 1:
        log.info("several processes: the controls are not cached (each process would build its own)")
        return None
    cache = ControlCache()
    try:  # an unwritable cache is said once and left out: it saves time, it changes no number
        cache.root.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=cache.root).close()
    except OSError as e:
        log.warning(f"the cache of the controls {cache.root} is not writable ({e.strerror or e}): the "
                    "controls are built in this run (set $OBLIVIATE_CACHE to a writable folder, or give "
                    "--no-cache to leave it out without this line)")
        return None
    return cache
