"""Run directories and the machine-readable ``results.json`` contract: written only when a command has
finished, atomically, and never holding a secret (a secret key's value and any API key of the environment, in
any of its forms, :func:`secret_forms`, become ``"***"``). docs/architecture.md, "Run directories and
results.json".
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import platform
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

from obliviate.errors import ObliviateError
from obliviate.utils import (add_run_dir, atomic_write_text, file_sha256, input_records, not_a_directory,
                             open_run_file,
                             recorded_inputs, recorded_path, replace_dir, run_write_path, staging_dir)

try:
    import fcntl
except ImportError:  # Windows: run directories are not locked
    fcntl = None


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("obliviate", "torch", "transformers", "tokenizers", "accelerate", "peft", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


SECRET_ENV_VARS = ("OBLIVIATE_JUDGE_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
"""Environment variables whose values are masked in every JSON file written here."""

_SECRET_KEYS = {"api_key", "apikey", "password", "passwd", "secret", "access_token", "auth_token",
                "authorization",
                "bearer_token", "hf_token"}
_SECRET_SUFFIXES = ("_api_key", "_apikey", "_password", "_secret", "_access_token", "_auth_token")
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (``api_key``, ``judge_api_key``, ``password``, ...)."""
    k = str(key).lower().replace("-", "_")
    return k in _SECRET_KEYS or k.endswith(_SECRET_SUFFIXES)


def secret_forms(secret: str | None) -> list[str]:
    """Every form in which ``secret`` may show up in a text, longest first: as given, without surrounding
    whitespace (a key read from a file keeps its newline), escaped as ``repr``, ``bytes`` repr and JSON write
    it, and percent-encoded. Replacing each of them masks the secret wherever an error text quotes it."""
    if not secret:
        return []
    forms = set()
    for value in {secret, secret.strip()}:
        forms |= {value, repr(value)[1:-1], json.dumps(value)[1:-1], urllib.parse.quote(value, safe="")}
        forms.add(repr(value.encode("utf-8", "backslashreplace"))[2:-1])
    return sorted((f for f in forms if f), key=len, reverse=True)


def _env_secrets() -> list[str]:
    names = set(SECRET_ENV_VARS) | {k for k in os.environ if k.upper().endswith("_API_KEY")}
    values = {os.environ.get(n, "") for n in names}
    # short values would mask too much
    forms = {f for v in values if len(v.strip()) >= 8 for f in secret_forms(v)}
    return sorted((f for f in forms if len(f) >= 8), key=len, reverse=True)


def _clean(obj: Any, secrets: list[str] | None = None) -> Any:
    """Make metrics JSON-safe: tensors/numpy scalars to floats, NaN/inf to None; mask secrets."""
    if secrets is None:
        secrets = _env_secrets()
    if isinstance(obj, dict):
        return {str(k): (REDACTED if is_secret_key(k) and v not in (None, "") else _clean(v, secrets))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v, secrets) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 0) == 0:
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        obj = str(obj)
    if isinstance(obj, str):
        for secret in secrets:
            obj = obj.replace(secret, REDACTED)
    return obj


def atomic_write_json(path: str | Path, obj: Any) -> None:
    text = json.dumps(_clean(obj), indent=2, sort_keys=True) + "\n"
    atomic_write_text(path, text)


def stored_form(obj: Any) -> Any:
    """``obj`` as :func:`atomic_write_json` stores it and a reader reads it back (NaN as None, tuples as
    lists, secrets masked): a result computed now and one read from a file compare equal."""
    return json.loads(json.dumps(_clean(obj), sort_keys=True))


LOCK_NAME = ".obliviate.lock"
"""The file in a run directory that the process running there holds locked (and writes its pid in)."""
MAX_HELD_LOCKS = 64
"""A process keeps at most this many run directories locked; the oldest is let go first (only a long-lived
process, such as a test session running many commands, ever prepares that many)."""
_HELD_LOCKS: dict[str, Any] = {}
"""Real path of a run directory -> the open lock file holding it locked, for the life of the process."""


def _launch_rank() -> int:
    """This process's rank in a launched run (``$RANK``, else ``$LOCAL_RANK``), 0 in a plain run."""
    for var in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(var, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def lock_out_dir(out: str | Path) -> None:
    """Hold ``out`` exclusively for this run: ``fcntl.flock`` on ``out/.obliviate.lock``, kept until the
    process ends. Another process that prepares the same directory fails at once with
    ``output directory DIR is in use by another obliviate run (pid N); ...``.

    Re-entrant: a process that prepares a directory it already holds (several commands run in one
    process) just keeps it. In a launched run (``$RANK`` / ``$LOCAL_RANK`` > 0) only rank 0 takes the
    lock, so the processes of one run never block each other. Where ``flock`` is missing or unsupported
    (Windows, some network file systems) nothing is locked.
    """
    if fcntl is None or _launch_rank() != 0:
        return
    key, path = os.path.realpath(out), Path(out) / LOCK_NAME
    held = _HELD_LOCKS.pop(key, None)
    if held is not None:
        try:
            same = os.path.samestat(os.fstat(held.fileno()), os.stat(path))
        except OSError:  # the directory was deleted (and perhaps made again) since: lock it afresh
            same = False
        if same:
            _HELD_LOCKS[key] = held  # (now the most recently used)
            return
        held.close()
    try:
        f = open_run_file(path, "a+")  # never through a link: a linked lock file's target is never truncated
    except OSError as e:
        raise ObliviateError(f"output directory {out} is not writable: {e.strerror or e}") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # e.g. ENOLCK: cannot lock here
            f.close()
            return
        f.seek(0)
        pid = f.read(40).strip() or "unknown"
        f.close()
        raise ObliviateError(f"output directory {out} is in use by another obliviate run (pid {pid}); wait "
                             "for it to finish, or choose another --out") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    _HELD_LOCKS[key] = f
    while len(_HELD_LOCKS) > MAX_HELD_LOCKS:
        _HELD_LOCKS.pop(next(iter(_HELD_LOCKS))).close()


PREVIOUS = "previous"
"""The folder of a run directory where a re-run moves the previous run's results (:data:`RUN_OUTPUTS`)."""
RUN_OUTPUTS = ("results.json", "model", "predictions.json", "per_example.json", "pretrain.json", "report.md",
               "report.html", "plots", "bench.md", "tuned.yaml", "world", "*.png", "tune/report.md",
               "tune/search.png")
"""What a finished run leaves in its run directory as its results, by name (``*.png``: every plot at the top),
which a re-run moves to ``previous/`` whole: ``results.json`` (every command), the model with its card
(``finetune``, ``unlearn``, ``pretrain``, ``tofu``), ``eval``'s ``predictions.json``, TOFU's
``per_example.json``, ``pretrain``'s ``pretrain.json``, the reports (``compare``, ``unlearn --requests``, the
recipes; ``bench.md``), ``tuned.yaml`` and the tuning report inside ``tune/``, the world (``world``,
``compare``) and the plots (``loss.png``, ``relearn_curve.png``, ...). Everything else a run writes is what a
re-run resumes from, and stays: the training checkpoints (``train/``, ``checkpoints/``, ``metrics.jsonl``),
the finished parts and cached models (``parts/``, ``models/``, ``methods/``, ``controls/``, ``control/``,
``attacks/``, ``known/``, ``sequential/``, ``tune/``'s trials, the relearning runs ``relearn*/``,
``unlearn/``, ``runs/``, ``muse/``), ``run.json`` (what the checkpoints were made with) and the lock; so does
anything a run did not write."""


def prepare_out_dir(out: str | Path) -> Path:
    """Create ``out`` (checking it is writable), lock it for this run (:func:`lock_out_dir`), make it a run
    directory (every later write under it goes through :func:`obliviate.utils.run_write_path`: no link is
    followed) and, where it holds a finished run (its ``results.json``), move that run's results
    (:data:`RUN_OUTPUTS`: results.json, the model with its card, predictions, reports, plots) aside, whole, to
    ``out/previous/`` (replacing an older ``previous/``; :func:`moved_previous` says so): a re-run that then
    fails or is interrupted leaves nothing that looks current, and loses nothing. What a re-run resumes from
    (checkpoints, parts, cached models, ``run.json``) stays; so do the leftovers of an unfinished run (no
    results.json), which the re-run writes afresh, and ``previous/`` then still holds the last finished run.

    Call it only when every check that needs no run has passed: an error before it leaves ``out`` as it was.
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe-{os.getpid()}"  # one per process: several may prepare the same directory
        if probe.is_symlink():  # never written through
            probe.unlink()
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:  # a file where the directory would be is said so, not "not writable: File exists"
        raise ObliviateError(not_a_directory(out, "output directory")
                             or f"output directory {out} is not writable: {e.strerror or e}") from None
    add_run_dir(out)
    lock_out_dir(out)
    _move_previous(out)
    _PREPARED.add(os.path.realpath(out))
    return out


def previous_outputs(out: str | Path) -> list[str]:
    """The results of the finished run in ``out`` (:data:`RUN_OUTPUTS` there, in that order, as paths relative
    to ``out``); [] when ``out`` holds no ``results.json`` (no finished run)."""
    out = Path(out)
    if not os.path.lexists(out / "results.json"):
        return []
    names: list[str] = []
    for pattern in RUN_OUTPUTS:
        if "*" in pattern:
            names += sorted(p.name for p in out.glob(pattern) if p.name not in names)
        elif os.path.lexists(out / pattern):
            names.append(pattern)
    return names


def _listed(names: list[str], shown: int = 6) -> str:
    """``a``, ``a and b``, ``a, b and c``; past ``shown`` names, the rest counted."""
    if len(names) > shown:
        names = [*names[:shown - 1], f"{len(names) - shown + 1} more"]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _move_previous(out: Path) -> None:
    """Move the finished run's results in ``out`` (:func:`previous_outputs`) into ``out/previous/`` (see
    :func:`prepare_out_dir`); rank 0 only."""
    items = previous_outputs(out)
    if not items or _launch_rank() != 0:
        return
    staged, moved = staging_dir(out / PREVIOUS), []
    try:
        for name in items:
            source = run_write_path(out / name)  # a link is moved, never followed
            (staged / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, staged / name)
            moved.append(name)
        replace_dir(staged, out / PREVIOUS)
    except BaseException as e:
        kept = False
        for name in moved:  # put back: the run directory is as it was
            try:
                os.replace(staged / name, out / name)
            except OSError:
                kept = True
        if not kept:
            shutil.rmtree(staged, ignore_errors=True)
        if not isinstance(e, OSError):
            raise
        raise ObliviateError(f"cannot move the previous run's {_listed(items)} "
                             f"to {out / PREVIOUS}: {e.strerror or e}") from None
    _MOVED[os.path.realpath(out)] = f"the previous run's {_listed(items)} moved to {out / PREVIOUS}/"


_MOVED: dict[str, str] = {}
"""Real path of a run directory -> what :func:`prepare_out_dir` moved aside there (:func:`moved_previous`)."""


def moved_previous(out: str | Path | None) -> str | None:
    """What :func:`prepare_out_dir` moved aside in ``out`` (``the previous run's results.json and model moved
    to OUT/previous/``), once, else None: the command line says it in the run's last line (its error, or
    a line of its own)."""
    return _MOVED.pop(os.path.realpath(out), None) if out else None


_PREPARED: set[str] = set()
"""Real paths of the run directories this process prepared (only those may get an invalid results.json)."""


def write_invalid_results(out: str | Path | None, error: str) -> Path | None:
    """Write ``out/results.json`` with ``status: invalid``, the ``error`` and no metrics, when ``out`` is a
    run directory this process prepared (:func:`prepare_out_dir`); returns its path, else None.

    For a run that could not produce a meaningful number (:class:`obliviate.errors.InvalidResult`): a reader
    of results.json sees that the run was invalid, and why, instead of a missing file or a score."""
    if out is None or os.path.realpath(out) not in _PREPARED:
        return None
    from obliviate.train.distributed import is_main_process

    path = Path(out) / "results.json"
    if is_main_process():
        atomic_write_json(path,
                          {"status": "invalid", "error": error, "metrics": None, "versions": versions()})
    return path


def input_fingerprint(path: str | Path | None) -> Any:
    """What identifies a model/tokenizer input for resuming: a local directory's files (name, size, mtime),
    or the string itself (a hub id, or None)."""
    if path is None:
        return None
    p = Path(path)
    if not p.is_dir():
        return str(path)
    files = sorted(f for f in p.iterdir() if f.is_file() and f.name != LOCK_NAME)  # the lock changes per run
    return {"path": str(p.resolve()),
            "files": [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files]}


DISPLAY_KEYS = ("progress", "desc")
"""Config keys that change what a run shows, not what it computes (the bars, and a bar's label): a run that
differs only in them is the same run."""


def without_display(obj: Any) -> Any:
    """``obj`` (dicts and lists of JSON data) without the :data:`DISPLAY_KEYS` at any depth: what a run
    computes with, for a fingerprint of a run (:func:`same_run`) or a key of the cache of the controls
    (:func:`obliviate.runs.cache.settings_key`)."""
    if isinstance(obj, dict):
        return {k: without_display(v) for k, v in obj.items() if k not in DISPLAY_KEYS}
    if isinstance(obj, list):
        return [without_display(v) for v in obj]
    return obj


def same_run(out: str | Path, fingerprint: dict, name: str = "run.json") -> bool:
    """Record ``fingerprint`` (config and inputs of a run) in ``out/name``; say whether checkpoints in
    ``out`` may be resumed.

    True when ``out`` holds no earlier fingerprint or the same one (``progress`` flags are ignored);
    False when an earlier run in ``out`` had another config or other inputs, whose checkpoints must
    not be resumed (the caller starts afresh).
    """
    import dataclasses

    fp = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in fingerprint.items()}
    fp = without_display(json.loads(json.dumps(_clean(fp))))
    path = Path(out) / name
    previous = None
    if path.is_file():
        try:
            previous = without_display(json.loads(path.read_text()))
        except (OSError, ValueError):
            previous = {}
    from obliviate.train import distributed as D

    D.barrier()  # under accelerate launch every process decides on the old file before rank 0 replaces it
    if D.is_main_process():
        atomic_write_json(path, fp)
    return previous is None or previous == fp


PATH_KEY_ENDS = ("_dir", "_dirs", "_file", "_files", "_path", "_paths")
"""A key of results.json whose name ends so holds a path (or a mapping or list of paths): written absolute
(:func:`obliviate.utils.recorded_path`), so a later command run from another directory finds it."""


def recorded_paths(obj: Any, paths: bool = False) -> Any:
    """``obj`` with every string under a key ending in :data:`PATH_KEY_ENDS` (at any depth, and inside the
    lists and mappings such a key holds: ``model_dirs``) made absolute where it is a local path
    (:func:`~obliviate.utils.recorded_path`; a hub id stays as it is)."""
    if isinstance(obj, dict):
        return {k: recorded_paths(v, paths or str(k).endswith(PATH_KEY_ENDS)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [recorded_paths(v, paths) for v in obj]
    if paths and isinstance(obj, (str, Path)):
        return recorded_path(obj)
    return obj


def run_inputs(task: Any = None, inputs: Any = None) -> list[dict]:
    """The data files a run read, each ``{"path", "sha256"}`` with its path absolute, by path: those read in
    the command's scope (:func:`obliviate.utils.recorded_inputs`: the command line records every file its
    readers open), those ``task`` was built from (``task.meta["inputs"]``, which
    :func:`obliviate.tasks.load_task` and the file readers record, so the API's tasks carry theirs) and
    ``inputs`` (more such records, or paths, hashed here). Model directories are not among them: results.json
    names them by path (their weights are not hashed)."""
    files = dict(recorded_inputs())
    meta = getattr(task, "meta", None)
    for rec in [*((meta or {}).get("inputs") or []), *(inputs or [])]:
        if isinstance(rec, dict):
            files.setdefault(recorded_path(rec["path"]), rec["sha256"])
        else:
            files.setdefault(recorded_path(rec), file_sha256(rec))
    return input_records(files)


def write_results(out: str | Path, *, seed: int, config: Any, metrics: dict, task: Any = None,
                  inputs: Any = None, **extra: Any) -> Path:
    """Write ``out/results.json`` atomically with status complete. ``task``: a task (its summary is written,
    and the files it was built from go to ``inputs``) or its summary; ``inputs``: the run's data files
    (:func:`run_inputs`: each path absolute, with its SHA-256). Every path under a key ending in ``_dir``,
    ``_file``, ``_path`` (and plurals) is written absolute (:func:`recorded_paths`)."""
    import dataclasses

    if dataclasses.is_dataclass(config):
        config = dataclasses.asdict(config)
    payload = {"status": "complete", "seed": seed, "config": config, "versions": versions(),
               "metrics": metrics}
    if task is not None:
        payload["task"] = task.summary() if hasattr(task, "summary") else task
    payload["inputs"] = run_inputs(task, inputs)
    payload.update(recorded_paths(extra))
    path = Path(out) / "results.json"
    from obliviate.train.distributed import is_main_process

    if is_main_process():  # under accelerate launch only rank 0 writes it
        atomic_write_json(path, payload)
    return path


def read_results(out: str | Path) -> dict:
    path = Path(out) / "results.json"
    with open(path) as f:
        return json.load(f)


def task_digest(task) -> str:
    """A hash of every item of ``task`` (training data, holdout, related corpus, evaluation sets): a file
    edited without changing its size changes it, and a rerun into the same --out does not resume checkpoints
    of the old."""
    h = hashlib.sha256()
    for part in (task.forget, task.retain, task.holdout):
        h.update(json.dumps(None if part is None else [part.qa, part.docs], default=str).encode())
    h.update(json.dumps(list(task.relearn or []), default=str).encode())
    for es in task.evals:
        items = [x.to_dict() if hasattr(x, "to_dict") else x for x in es.items]
        h.update(json.dumps([es.name, es.role, es.kind, items], sort_keys=True, default=str).encode())
    return h.hexdigest()


def previous_digest(out: Path) -> str | None:
    """The task digest an earlier run recorded in ``out/run.json`` (key ``data``; None without one)."""
    try:
        return json.loads((out / "run.json").read_text()).get("data")
    except (OSError, ValueError, AttributeError):
        return None


def resumes(out: Path, fingerprint: dict, task, log) -> bool:
    """Whether a rerun into ``out`` resumes its checkpoints (:func:`same_run` of ``fingerprint`` with the
    task's summary and :func:`task_digest` as ``task`` and ``data``); when not, ``log`` (a logger) says why in
    one line: the task's items changed since the earlier run, or another config or model."""
    digest, before = task_digest(task), previous_digest(out)  # a file edited in place: not resumed, said why
    resume = same_run(out, {**fingerprint, "task": task.summary(), "data": digest})
    if not resume and before is not None and before != digest:
        log.info(f"{out} holds checkpoints of a run on other data (the task's items changed: {before[:12]} "
                 f"-> {digest[:12]}); starting afresh")
    elif not resume:
        log.info(f"{out} holds checkpoints of another run (other config or model); starting afresh")
    return resume
