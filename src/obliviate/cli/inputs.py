"""What the user gave the command line, checked and read: :func:`check_inputs`, the validation boundary, runs
in one pass before any command (:func:`obliviate.cli.main.main` calls it between parsing the arguments and
running the command): every path by its kind, the overrides and ``--config``, the task spec through its schema
and the files it lists, a local model directory's ``config.json`` before any weights are read, each failing as
one :class:`~obliviate.errors.ObliviateError` line naming the input (docs/bad-input.md, "The validation
boundary"). Then a command checks its run directory against its inputs (:func:`check_out_dir`), reads its task
(:func:`task_from_args`) and loads its model (:func:`load_model_args`), in that order; :func:`checked_run`
gives ``unlearn``'s and ``tune``'s loaders to :func:`~obliviate.pipelines.unlearn.prepare_run`. The options
are declared in :mod:`obliviate.cli.args`.
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import torch

from obliviate.cli.args import FILE_SETS
from obliviate.config import load_yaml, parse_overrides
from obliviate.errors import ConfigError, DataError
from obliviate.models.load import (check_model_dir, check_model_path, is_local, load_model_and_tokenizer,
                                   load_tokenizer, missing_reason, parameter_count, resolve_dtype)
from obliviate.models.tokenizer import ensure_pad_token
from obliviate.pipelines.unlearn import prepare_run
from obliviate.runs.results import input_fingerprint
from obliviate.tasks import Task, check_task_spec, load_task, parse_spec
from obliviate.tasks.files import FieldsUnknown, spec_files, task_from_files
from obliviate.tasks.sources.generic import parse_mapping
from obliviate.train.distributed import is_main_process
from obliviate.utils import not_a_directory

log = logging.getLogger(__name__)

MODEL_DIRS = ("model", "base", "oracle", "base_untrained", "retain_model")
"""Options that name a model: a local directory with a valid config.json (or a hub id)."""
OTHER_DIRS = {"tokenizer": "tokenizer", "adapter": "adapter", "lm_eval_include": "lm-eval task"}
"""Options that name another directory, and what it is called in an error."""


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_file(path: str, what: str, missing: str | None = None) -> None:
    """DataError unless ``path`` is a readable regular file: ``missing`` is the whole message for a path that
    does not exist (default ``{what} not found: PATH``)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise DataError(missing or f"{what} not found: {path}")
    if p.is_dir():
        raise DataError(f"{what} {path} is a directory, not a file")
    if not p.is_file():
        raise DataError(f"{what} {path} is not a regular file (a device, pipe or socket)")
    if not os.access(p, os.R_OK):
        raise DataError(f"{what} {path} cannot be read: permission denied")


def check_dir(path: str, what: str) -> None:
    """ConfigError unless a local ``path`` is a readable directory (a name that can only be a hub id
    passes)."""
    if not is_local(str(path)):
        return
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"{what} directory {str(path)!r} {missing_reason(p)}")
    if not p.is_dir():
        raise ConfigError(f"{what} path {str(path)!r} is not a directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise ConfigError(f"{what} directory {str(path)!r} cannot be read: permission denied")


def check_inputs(args) -> None:
    """Check every user-facing value of ``args`` that needs no model run (see the module docstring)."""
    overrides = getattr(args, "overrides", None)
    if overrides:
        parse_overrides(overrides)
    if getattr(args, "config", None):
        check_file(args.config, "config file")
        load_yaml(args.config)
    for dest in FILE_SETS:  # the options that name data files, each given once or more
        value = getattr(args, dest, None)
        for path in value if isinstance(value, list) else []:  # (tofu's --forget is a split name)
            check_file(path, f"{flag(dest)} file", f"file not found: {path}")
    if getattr(args, "data", None):
        check_file(args.data, "--data file", f"file not found: {args.data}")
    task = getattr(args, "task", None)
    if isinstance(task, str):
        check_task_spec(task)
        name, arg = parse_spec(task)
        if name == "file":
            check_file(arg, "task spec")
            for path in spec_files(arg):
                check_file(str(path), f"file listed in the task spec {arg}", f"file not found: {path}")
    for dest, what in OTHER_DIRS.items():
        if getattr(args, dest, None):
            check_dir(getattr(args, dest), what)
    for dest in MODEL_DIRS:
        path = getattr(args, dest, None)
        if path and is_local(str(path)):
            check_model_dir(path)


def eval_overrides(args) -> dict:
    """The ``eval`` config section set by ``--batch-size`` / ``--max-new-tokens`` (config keys ``eval.*``)."""
    out = {}
    if getattr(args, "eval_batch_size", None) is not None:
        out["batch_size"] = args.eval_batch_size
    if getattr(args, "max_new_tokens", None) is not None:
        out["max_new_tokens"] = args.max_new_tokens
    return out


def mapping_from_args(values: list[str] | None, files: dict[str, list[str]]) -> str | dict | None:
    """The mapping ``--mapping`` (repeated) gives ``files`` (set -> paths as given): None without one, the
    string when one mapping applies to every file, else ``{path: mapping}`` for every file that has one (its
    own, else its set's, else the common one), as :func:`~obliviate.tasks.files.task_from_files` takes it.
    ``FILE=FIELDS`` is told from ``FIELDS`` by the two ``=`` of its first pair; FILE is a path given (as typed
    or the same file), the name of exactly one file given, or a set given. A FILE that names none of them is a
    ConfigError."""
    if not values:
        return None
    given = [(k, str(p)) for k, ps in files.items() for p in ps or []]
    common, own = None, {}
    for value in values:
        if value.split(",", 1)[0].count("=") < 2:
            parse_mapping(value)  # a malformed one fails here
            if common is not None:
                raise ConfigError(f"--mapping {common!r} and {value!r} both apply to every file: name the "
                                  "file of one, --mapping FILE=question=...,answer=...")
            common = value
            continue
        key, fields = (x.strip() for x in value.split("=", 1))
        parse_mapping(fields)
        target = _mapped_file(key, files, [p for _, p in given])
        if target in own:
            raise ConfigError(f"--mapping: {key!r} is given two mappings ({own[target]!r}, {fields!r})")
        own[target] = fields
    if not own:
        return common
    out = {}
    for key, p in given:
        m = own.get(p) or own.get(key) or common
        if m:
            out[p] = m
    return out


def _mapped_file(key: str, files: dict[str, list[str]], paths: list[str]) -> str:
    """The path given (or the set) that ``--mapping KEY=...`` names."""
    if key in paths or (key in files and files[key]):
        return key
    same = sorted({p for p in paths if _same_file(key, p)} or {p for p in paths if Path(p).name == key})
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        raise ConfigError(f"--mapping {key}=...: {key!r} names {len(same)} "
                          f"files given ({', '.join(same)}): give the path")
    sets = [k for k, v in files.items() if v]
    raise ConfigError(f"--mapping {key}=...: {key!r} is neither a file given ({', '.join(paths)}) nor a set "
                      f"given ({', '.join(sets)})")


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def task_files(args) -> dict[str, list[str]]:
    """The shorthand's files of ``args``: set -> paths as given."""
    return {k: list(getattr(args, k, None) or []) for k in FILE_SETS}


def task_spec(args) -> str:
    """The task the arguments name (``files`` for the shorthand)."""
    if getattr(args, "forget", None):
        if args.task:
            raise ConfigError("give either --task or --forget/--retain files, not both")
        return "files"
    for flag in ("retain", "utility", "holdout", "relearn", "mapping"):
        if getattr(args, flag, None):
            raise ConfigError(f"--{flag} needs --forget FILE (or use --task file:SPEC.yaml)")
    return getattr(args, "task", None) or "world"


def task_from_args(args, *, seed: int = 0, world: dict | None = None) -> Task:
    """Load the task of ``args`` (no model needed): the shorthand files, or ``--task``."""
    spec = task_spec(args)
    limit = getattr(args, "limit", None)
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")
    if spec == "files":
        try:
            task = task_from_files(args.forget, args.retain, utility=args.utility, holdout=args.holdout,
                                   relearn=args.relearn,
                                   mapping=mapping_from_args(args.mapping, task_files(args)),
                                   template=args.template, chat=args.chat_template, limit=limit)
        except FieldsUnknown as e:  # the hint in the command line's syntax
            raise DataError(e.hint("cli")) from None
    else:
        check_task_spec(spec)
        task = load_task(spec, seed=seed, world=world or {}, limit=limit,
                         allow_hub=bool(getattr(args, "allow_hub", False)))
        if getattr(args, "chat_template", False):
            task.prompt.chat = True
        elif getattr(args, "template", None):
            task.prompt.template = args.template
    return task


def input_paths(args, *extra: str | None) -> list[str]:
    """The inputs a command reads from disk, for :func:`check_out_dir`: ``--model`` and ``--tokenizer``, the
    task's files (``--forget`` ... ``--relearn``, the spec of ``--task file:SPEC.yaml``), ``--data``, and
    ``extra``."""
    paths = [getattr(args, "model", None), getattr(args, "tokenizer", None), getattr(args, "adapter", None),
             getattr(args, "data", None), *extra]
    for flag in FILE_SETS:
        files = getattr(args, flag, None)
        paths += files if isinstance(files, list) else []  # (tofu's --forget is a split name)
    task = getattr(args, "task", None)
    if isinstance(task, str) and task.startswith("file:"):
        paths.append(task[len("file:"):])
    return [p for p in paths if p]


def check_out_dir(out: str, inputs: list[str | None]) -> None:
    """The overlap check every command runs on ``--out`` before it touches it: refuse an empty ``--out``, one
    that is, contains or lies inside an input (a model or tokenizer directory, a data file), and one holding
    a symbolic link whose target is, contains or lies inside an input (``OUT/model -> MODEL``). Any other
    link under ``--out`` is refused when the run would write through it
    (:func:`obliviate.utils.run_write_path`)."""
    if out is None or not str(out).strip():
        raise ConfigError("--out is empty (an unset shell variable?): give a run directory")
    blocked = not_a_directory(out, "--out")
    if blocked:
        raise ConfigError(blocked)
    o = Path(out).expanduser().resolve()
    given = [(inp, Path(inp).expanduser().resolve()) for inp in inputs if inp and Path(inp).exists()]
    for inp, i in given:
        if o == i or i in o.parents or o in i.parents:
            what = "directory" if i.is_dir() else "file"
            raise ConfigError(f"--out {out} overlaps the input {what} {inp}: choose a directory outside it, "
                              "so nothing is overwritten")
    for link in _links_under(o):
        t = link.resolve()
        for inp, i in given:
            if t == i or i in t.parents or t in i.parents:
                raise ConfigError(f"--out {out} holds {link}, a symbolic link to the input {inp}: a run "
                                  "would write through it; remove the link or choose another --out")


def _links_under(root: Path, limit: int = 100_000) -> list[Path]:
    """The symbolic links under ``root`` (not followed; at most ``limit`` entries looked at)."""
    links, seen = [], 0
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(here) / name
            if p.is_symlink():
                links.append(p)
        seen += len(dirs) + len(files)
        if seen > limit:
            break
    return links


def pick_device(name: str | None) -> torch.device:
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device {name!r} is not a device (valid: cpu, cuda, cuda:N, mps)") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"--device {name!r}: obliviate runs on cpu, cuda, cuda:N or mps, not {dev.type}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: no CUDA device is available here")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"--device {name}: this machine has "
                          f"{torch.cuda.device_count()} CUDA device(s), numbered from 0")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {name}: no MPS (Apple GPU) device is available here")
    return dev


def device_and_dtype(args, trains: bool = True) -> tuple[torch.device, torch.dtype | str | None]:
    """``--device`` and ``--dtype``, checked before anything is loaded: an unknown dtype, a device that is
    not one or is not here (``--device cuda`` without CUDA) is one line. ``trains``: the command trains the
    model, and float16 training on the CPU is refused (its losses turn NaN within steps there; float32 and
    bfloat16 train on the CPU, float16 on a GPU)."""
    dtype = resolve_dtype(getattr(args, "dtype", None))
    device = pick_device(getattr(args, "device", None))
    if trains and device.type == "cpu" and dtype == torch.float16:
        raise ConfigError(f"--dtype {args.dtype} on the CPU: training in float16 is not supported there (its "
                          "losses turn NaN); use --dtype float32 or bfloat16 on the CPU, or float16 on a GPU")
    return device, dtype


def tokenizer_args(args, path: str | None = None):
    """The tokenizer of ``--tokenizer``, else of the model (``path`` or ``--model``), with ``--pad-policy``;
    the model's path is checked first, so a mistyped ``--model`` is named as the model (not as a missing
    tokenizer directory)."""
    path = path or args.model
    check_model_path(path)
    tok = load_tokenizer(args.tokenizer,
                         of_model=False) if args.tokenizer else load_tokenizer(path, of_model=True)
    return ensure_pad_token(tok, policy=args.pad_policy)


def load_model_args(args, path: str | None = None, trains: bool = True):
    """(model, tokenizer) of ``--model`` (or ``path``), on ``--device`` in ``--dtype``
    (:func:`~obliviate.models.load.load_model_and_tokenizer`); ``--adapter`` attached to ``--model`` (said in
    one line). ``trains``: see :func:`device_and_dtype`."""
    path = path or args.model
    device, dtype = device_and_dtype(args, trains)  # a bad device or dtype fails before the load
    adapter = getattr(args, "adapter", None) if path == args.model else None
    model, tok = load_model_and_tokenizer(path, args.pad_policy, dtype=dtype, tokenizer_path=args.tokenizer,
                                          adapter=adapter)
    if adapter is not None and is_main_process():
        print(f"obliviate: attached the adapter {adapter} to "
              f"{path} (merged into its weights)", file=sys.stderr)
    return model.to(device).eval(), tok


def checked_run(args, tuning: bool = False):
    """``(cfg, task, model, tokenizer, preset, split)`` of ``unlearn`` and ``tune``: ``--out`` against the
    inputs, then the pipeline's checks in order with the loaders of ``args``
    (:func:`~obliviate.pipelines.unlearn.prepare_run`)."""
    check_out_dir(args.out, input_paths(args))
    return prepare_run(args.method, seed=args.seed, config_file=args.config, overrides=args.overrides,
                       eval=eval_overrides(args), model_dir=args.model, tuning=tuning,
                       load_task=lambda cfg: task_from_args(args, seed=cfg.seed, world=cfg.world),
                       load_tokenizer=lambda: tokenizer_args(args), load_model=lambda: load_model_args(args),
                       model_size=lambda: parameter_count(args.model))


def model_fingerprint(args, key: str = "base") -> dict:
    """What identifies a command's model inputs, for resuming into the same ``--out``: ``--model`` (under
    ``key``), ``--tokenizer`` and, when given, ``--adapter``
    (:func:`~obliviate.runs.results.input_fingerprint` of each)."""
    return {key: input_fingerprint(args.model), "tokenizer": input_fingerprint(args.tokenizer),
            **({"adapter": input_fingerprint(args.adapter)} if args.adapter else {})}


def fingerprint(args) -> dict:
    """What identifies the inputs of an ``unlearn`` or ``tune`` run: the model's (:func:`model_fingerprint`)
    and ``--pad-policy``."""
    return {**model_fingerprint(args), "pad_policy": args.pad_policy}


def tune_log(args):
    return (lambda line: None) if args.no_progress else (lambda line: print(line, file=sys.stderr))
