"""Small shared helpers: seeding, data directory, cache directory, atomic file writes, and the one check
before any file of a run directory is written (:func:`run_write_path`)."""

from __future__ import annotations

import contextvars
import hashlib
import os
import random
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from obliviate.errors import ConfigError, ObliviateError

SEED_LIMIT = 2**32
"""Seeds are integers in ``[0, SEED_LIMIT)``: what ``np.random.seed`` takes (``torch.manual_seed`` takes
``[-2**63, 2**64)`` and ``np.random.default_rng`` any integer >= 0), the same on every backend. Every integer
config field named ``seed`` or ``*_seed`` is checked against it when a config is built
(:func:`obliviate.config.from_dict`)."""


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` if it is an integer in ``[0, 2**32)``, else a one-line :class:`ConfigError` naming
    ``name``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer in [0, 2**32), got {repr(seed)[:80]}")
    if not 0 <= seed < SEED_LIMIT:
        shown = str(seed) if len(str(seed)) <= 80 else f"an integer of {len(str(seed))} digits"
        raise ConfigError(f"{name} must be an integer in [0, 2**32) = [0, {SEED_LIMIT - 1}], got {shown}")
    return int(seed)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators; ConfigError for a seed outside ``[0, 2**32)``."""
    seed = check_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def data_dir() -> Path:
    """``$OBLIVIATE_DATA``, else ``../shared/data`` relative to the working directory."""
    env = os.environ.get("OBLIVIATE_DATA")
    return Path(env) if env else Path("..") / "shared" / "data"


def cache_dir() -> Path:
    """The one cache of every run, shared whatever the working directory (pretrained base models, tokenizers,
    the controls of ``attack`` and ``compare``): ``$OBLIVIATE_CACHE``, else ``$XDG_CACHE_HOME/obliviate``,
    else ``~/.cache/obliviate``; always absolute."""
    env = os.environ.get("OBLIVIATE_CACHE") or ""
    if env.strip():
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(xdg).expanduser() if os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".cache"
    return (root / "obliviate").absolute()


# ---------------------------------------------------------------- paths as a run records them, and its inputs

def looks_like_path(s: str) -> bool:
    """True for strings that are plainly meant as a filesystem path (``./x``, ``/x``, ``~/x``, ``a/b/c``,
    ``x/``).

    Narrower than "not a hub id": ``"not a hub id!"`` is neither (see obliviate.pipelines.tofu)."""
    return (
        s.startswith((".", "/", "~"))
        or s.count("/") > 1
        or s.endswith("/")
        or (os.sep != "/" and os.sep in s)
    )


def recorded_path(value: str | os.PathLike | None) -> str | None:
    """``value`` as ``results.json`` and model cards record it: a local path absolute (``user-model`` -> the
    directory of that name in the working directory, without following links), so a later command run from
    anywhere finds it; a name that is not on disk and is not plainly a path (a hub id such as ``org/name``, a
    placeholder such as ``<model>``) as it is. None stays None."""
    if value is None:
        return None
    s = str(value)
    path = os.path.expanduser(s)
    if s and (os.path.isabs(path) or os.path.lexists(path) or looks_like_path(s)):
        return os.path.abspath(path)
    return s


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of the file ``path``'s bytes (hex), read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_RECORDERS: contextvars.ContextVar[tuple[dict,
                                         ...]] = contextvars.ContextVar("obliviate_input_recorders",
                                                                        default=())
"""The open :func:`recording_inputs` scopes, innermost last: absolute path -> SHA-256 of each file read in
them."""


def note_input(path: str | os.PathLike) -> None:
    """Record that the data file ``path`` is being read (the readers of :mod:`obliviate.tasks` call it), with
    its SHA-256, in every open :func:`recording_inputs` scope; nothing outside one. A file that cannot be read
    is left to the reader's own error."""
    scopes = _RECORDERS.get()
    if not scopes:
        return
    p = os.path.abspath(os.path.expanduser(str(path)))
    digest = next((s[p] for s in scopes if p in s), None)
    if digest is None:
        try:
            digest = file_sha256(p)
        except OSError:
            return
    for scope in scopes:
        scope.setdefault(p, digest)


@contextmanager
def recording_inputs():
    """``with recording_inputs() as seen:``: ``seen`` fills with ``{absolute path: SHA-256}`` of every data
    file read inside (:func:`note_input`); scopes nest, each seeing the files read within it."""
    seen: dict[str, str] = {}
    token = _RECORDERS.set((*_RECORDERS.get(), seen))
    try:
        yield seen
    finally:
        _RECORDERS.reset(token)


def recorded_inputs() -> dict[str, str]:
    """``{absolute path: SHA-256}`` of the files read so far in the outermost open :func:`recording_inputs`
    scope (the command line opens one per command), {} outside one."""
    scopes = _RECORDERS.get()
    return dict(scopes[0]) if scopes else {}


def input_records(files: dict[str, str]) -> list[dict]:
    """``[{"path", "sha256"}, ...]`` of ``{path: SHA-256}``, by path: how results.json and cards list
    inputs."""
    return [{"path": p, "sha256": files[p]} for p in sorted(files)]


# ---------------------------------------------------------------- run directories: where a run may write

_RUN_DIRS: set[str] = set()
"""Absolute paths of the run directories this process prepared."""


def file_in_the_way(path: str | Path) -> Path | None:
    """The first of ``path`` and its parents that exists but is not a directory (a file, a dangling link):
    what keeps a directory from being made at ``path``; None where nothing does."""
    p = Path(path).expanduser()
    for q in (p, *p.parents):
        if q.is_symlink() or q.exists():
            return None if q.is_dir() else q
    return None


def not_a_directory(path: str | Path, what: str) -> str | None:
    """``"WHAT PATH is a file, not a directory"`` (or ``"WHAT PATH: PARENT is a file, not a directory"``)
    where :func:`file_in_the_way` finds one, else None: the one wording of that error."""
    blocked = file_in_the_way(path)
    if blocked is None:
        return None
    return (f"{what} {path}{'' if blocked == Path(path).expanduser() else f': {blocked}'} "
            "is a file, not a directory")


def add_run_dir(out: str | Path) -> None:
    """Mark ``out`` as a run directory of this process (:func:`obliviate.runs.results.prepare_out_dir` does):
    from now on every write under it goes through :func:`run_write_path`."""
    _RUN_DIRS.add(os.path.abspath(out))


def _run_dir_of(path: str) -> tuple[str, str] | None:
    """``(run directory, the path spelt under it)`` for the innermost run directory holding ``path``
    (compared as written, and as ``path`` spelt under each directory's real path), else None."""
    best = None
    for root in _RUN_DIRS:
        for spelt in {root, os.path.realpath(root)}:
            if path == spelt or path.startswith(spelt.rstrip(os.sep) + os.sep):
                if best is None or len(root) > len(best[0]):
                    best = (root, os.path.join(root, os.path.relpath(path, spelt)))
    return best


def run_write_path(path: str | Path) -> Path:
    """The one check before a run writes ``path`` (a file or a folder); returns it as an absolute path.

    Under a run directory (:func:`add_run_dir`) no symbolic link is followed: when any component between
    ``--out`` and ``path`` (``path`` itself included) is a link, this raises a one-line
    :class:`ObliviateError` naming it, before anything is written. A link to the input model inside
    ``--out`` (``OUT/model -> MODEL``) would otherwise let the run overwrite its own input. ``--out`` itself
    may be a link: the overlap check (``obliviate.cli.inputs.check_out_dir``) resolves it. Paths outside
    every run directory are returned unchecked.
    """
    p = os.path.abspath(path)
    found = _run_dir_of(p)
    if found is None:
        return Path(p)
    root, p = found
    rel = os.path.relpath(p, root)
    cur = root
    for part in [] if rel == os.curdir else rel.split(os.sep):
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            try:
                target = os.readlink(cur)
            except OSError:
                target = "?"
            what = "it is" if cur == p else f"{cur} is"
            raise ObliviateError(f"refusing to write {p}: {what} a symbolic link (to {target}); a run writes "
                                 f"only real files and folders under its --out {root}: remove the link")
    return Path(p)


def open_run_file(path: str | Path, mode: str = "a"):
    """Open ``path`` (checked by :func:`run_write_path`) to append (``"a"``) or read and append (``"a+"``),
    in text mode, never through a link (``O_NOFOLLOW``) and never into a file that has other hard links
    (appending to one would change that other file too): either is a one-line :class:`ObliviateError`."""
    path = run_write_path(path)
    flags = (os.O_CREAT | os.O_APPEND | (os.O_RDWR if "+" in mode else os.O_WRONLY)
             | getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if os.path.islink(path):
            raise ObliviateError(f"refusing to write {path}: it is a symbolic "
                                 f"link (to {os.readlink(path)})") from None
        raise ObliviateError(f"cannot write {path.name} in {path.parent}: {_os_reason(e)}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        what = "has other hard links" if stat.S_ISREG(st.st_mode) else "is not a regular file"
        raise ObliviateError(f"refusing to write {path}: it {what}; a "
                             "run writes only its own files: remove it")
    return os.fdopen(fd, mode)


def replace_dir(staged: str | Path, final: str | Path) -> Path:
    """Move the finished folder ``staged`` to ``final`` (checked by :func:`run_write_path`), replacing an
    earlier ``final`` as a whole: its old files never mix with the new ones, and a link is never followed."""
    final = run_write_path(final)
    old = None
    if final.exists():
        if not final.is_dir():
            raise ObliviateError(f"cannot write the folder {final}: a file of that name is in the way")
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(staged, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return final


def staging_dir(final: str | Path) -> Path:
    """A new empty folder beside ``final`` (checked by :func:`run_write_path`) to write its files into,
    then :func:`replace_dir` it: nothing is written into ``final`` itself, nor through a link or hard link
    there."""
    final = run_write_path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
        os.chmod(staged, 0o777 & ~_umask())
    except OSError as e:
        raise ObliviateError(f"cannot write the folder {final}: {_os_reason(e)}") from None
    return staged


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode())


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; on failure the old file (if any) is kept and no temporary is
    left.

    The file is replaced, never written through: a link or a hard link at ``path`` is not followed. Under a
    run directory ``path`` is checked by :func:`run_write_path` first.

    An ``OSError`` (full disk, read-only or missing permissions) becomes an :class:`ObliviateError`
    naming the file: ``cannot write results.json in DIR: [Errno 28] No space left on device``.
    """
    path = run_write_path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise ObliviateError(f"cannot write {path.name} in {path.parent}: {_os_reason(e)}") from None
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _os_reason(e: OSError) -> str:
    return f"[Errno {e.errno}] {e.strerror}" if e.errno and e.strerror else (str(e) or type(e).__name__)
