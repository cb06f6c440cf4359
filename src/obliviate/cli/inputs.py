"""The validation boundary of the command line: :func:`check_inputs` runs, in one pass, before any command
(:func:`obliviate.cli.main.main` calls it between parsing the arguments and running the command).

What passes through it, each failing as one :class:`~obliviate.errors.ObliviateError` line naming the input:

- numbers given as options (``--seed``, ``--limit``, ``--batch-size``, ``--max-new-tokens``, ``--C``): checked
  by their argparse types (:mod:`obliviate.cli.args`), so a bad one never reaches the command;
- every path, by the kind it must be: a data file, a config file, a task spec file (``--task file:SPEC``) must be
  a readable file; a model, tokenizer or adapter directory a directory (a name that can only be a hub id is left
  to the hub);
- dotted overrides (``key=value``) and the ``--config`` YAML file: parsed here (:mod:`obliviate.config`); their
  keys and types are checked against the command's config dataclass when the command builds it, before it loads
  a model;
- the task: ``--task`` names a provider; a spec file is read through its schema
  (:class:`obliviate.tasks.files.TaskSpec`), and each file it lists must be a readable file;
- a local model directory's ``config.json`` (:func:`obliviate.models.load.check_model_dir`: sizes, finite floats,
  special-token ids against the vocabulary), before any weights are read.

The contents of data files are checked by the one reader every loader uses (:mod:`obliviate.tasks.sources._io`);
each command loads its task before it loads a model.
"""

from __future__ import annotations

import os
from pathlib import Path

from obliviate.config import load_yaml, parse_overrides
from obliviate.errors import ConfigError, DataError
from obliviate.models._paths import is_local, missing_reason
from obliviate.models.load import check_model_dir
from obliviate.tasks import check_task_spec, parse_spec
from obliviate.tasks.files import spec_files

FILE_LISTS = ("forget", "retain", "utility", "holdout", "relearn")
"""Options that name data files, each given once or more (``--forget A --forget B``)."""
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
    """ConfigError unless a local ``path`` is a readable directory (a name that can only be a hub id passes)."""
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
    for dest in FILE_LISTS:
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
