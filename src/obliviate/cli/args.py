"""Options the commands share: ``--out``/``--seed``/``--config`` and overrides (:func:`add_common`),
``--model``, ``--task`` and the file shorthand, and the ``eval.*`` options.

Everything that can be checked without a model is checked in :func:`check_out_dir` and
:func:`task_from_args` before :func:`load_model_args` loads one.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from pathlib import Path

import torch

from obliviate.errors import ConfigError, DataError
from obliviate.models.load import check_model_path, load_model_and_tokenizer, resolve_dtype
from obliviate.models.tokenizer import ensure_pad_token, load_tokenizer
from obliviate.tasks import Task, check_task_spec, load_task
from obliviate.tasks.files import FieldsUnknown, task_from_files
from obliviate.tasks.sources.generic import parse_mapping
from obliviate.train.distributed import is_main_process


def seed_arg(text: str) -> int:
    """``--seed``: an integer in ``[0, 2**32)`` (the range of :func:`obliviate.utils.check_seed`), checked
    by argparse, so a bad seed fails before anything runs."""
    try:
        value = int(text)
    except ValueError:  # not an integer, or more digits than int() converts
        value = None
    if value is None or not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**32) = [0, {2**32 - 1}], got {_shown(text)}")
    return value


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else f"{text[:80]!r}... ({len(text)} characters)"


def count_arg(text: str) -> int:
    """A count option (``--limit``, ``--batch-size``, ``--max-new-tokens``): an integer >= 1, checked by argparse."""
    try:
        value = int(text)
    except ValueError:  # not an integer, or more digits than int() converts
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {_shown(text)}")
    return value


def positive_float_arg(text: str) -> float:
    """A strength option (``--C``): a finite number > 0, checked by argparse."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {_shown(text)}")
    return value


def add_common(p: argparse.ArgumentParser, out_required: bool = True) -> None:
    p.add_argument("--out", required=out_required, help="run directory (results.json is written here last)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the run and, unless overridden, of the "
                   "world: an integer in [0, 2**32)")
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (they are shown only when stderr "
                   "is a terminal: a log file or a pipe gets none)")
    p.add_argument("--log-with", metavar="TRACKERS", help="also log every training loop to these experiment "
                   "trackers (comma-separated): tensorboard, mlflow, wandb")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, e.g. train.steps=100")


def seeded(seed: int, paths: list[str]) -> dict:
    """A base config dict with ``seed`` set at each dotted path."""
    base: dict = {}
    for path in paths:
        node = base
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = seed
    return base



def add_model_args(p: argparse.ArgumentParser, *, flag: str = "--model", aliases: tuple[str, ...] = (),
                   required: bool = True, help: str = "model directory or hub id") -> None:
    p.add_argument(flag, *aliases, dest="model", required=required, help=help)
    p.add_argument("--tokenizer", help="tokenizer directory, if not the model's")
    p.add_argument("--adapter", metavar="DIR", help="a peft (LoRA) adapter directory to attach to the model, merged "
                   "into its weights (it may be the model's own directory; without --adapter, a model directory "
                   "that holds adapter_config.json is refused)")
    p.add_argument("--pad-policy", choices=["error", "eos"], default="error",
                   help="what to do when the tokenizer has no pad token (eos: pad with eos)")
    p.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: cuda when available, else cpu)")
    p.add_argument("--dtype", help="float32, bfloat16 or float16 (default: as saved)")


def add_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-size", type=count_arg, dest="eval_batch_size", help="evaluation batch size (default 32)")
    p.add_argument("--max-new-tokens", type=count_arg, help="greedy tokens per QA answer (default: the longest "
                   "reference answer plus 4)")


def eval_overrides(args) -> dict:
    """The ``eval`` config section set by ``--batch-size`` / ``--max-new-tokens`` (config keys ``eval.*``)."""
    out = {}
    if getattr(args, "eval_batch_size", None) is not None:
        out["batch_size"] = args.eval_batch_size
    if getattr(args, "max_new_tokens", None) is not None:
        out["max_new_tokens"] = args.max_new_tokens
    return out


MAPPING_HELP = ("field mapping of those files: question=prompt,answer=target for every file, or "
                "FILE=question=prompt,answer=target for one file (FILE: its path or name, or a set: forget, retain, "
                "utility, holdout, relearn); repeatable, a file's own mapping wins over its set's and the common one")
"""``--mapping``'s help (the file shorthand's and ``eval --data``'s)."""

FILE_SETS = ("forget", "retain", "utility", "holdout", "relearn")
"""The shorthand's sets of files, in the order of their options."""


def mapping_from_args(values: list[str] | None, files: dict[str, list[str]]) -> str | dict | None:
    """The mapping ``--mapping`` (repeated) gives ``files`` (set -> paths as given): None without one, the string
    when one mapping applies to every file, else ``{path: mapping}`` for every file that has one (its own, else its
    set's, else the common one), as :func:`~obliviate.tasks.files.task_from_files` takes it. ``FILE=FIELDS`` is told
    from ``FIELDS`` by the two ``=`` of its first pair; FILE is a path given (as typed or the same file), the name
    of exactly one file given, or a set given. A FILE that names none of them is a ConfigError."""
    if not values:
        return None
    given = [(k, str(p)) for k, ps in files.items() for p in ps or []]
    common, own = None, {}
    for value in values:
        if value.split(",", 1)[0].count("=") < 2:
            parse_mapping(value)  # a malformed one fails here
            if common is not None:
                raise ConfigError(f"--mapping {common!r} and {value!r} both apply to every file: name the file of "
                                  "one, --mapping FILE=question=...,answer=...")
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
        raise ConfigError(f"--mapping {key}=...: {key!r} names {len(same)} files given ({', '.join(same)}): "
                          "give the path")
    sets = [k for k, v in files.items() if v]
    raise ConfigError(f"--mapping {key}=...: {key!r} is neither a file given ({', '.join(paths)}) nor a set given "
                      f"({', '.join(sets)})")


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False


def task_files(args) -> dict[str, list[str]]:
    """The shorthand's files of ``args``: set -> paths as given."""
    return {k: list(getattr(args, k, None) or []) for k in FILE_SETS}


ALLOW_HUB_HELP = ("read a benchmark file the data directory lacks from the Hugging Face hub with `datasets` (tofu, "
                  "muse, wmdp, rwku, benchmark:*; $HF_ENDPOINT, cached under $HF_HOME; one line on stderr names each "
                  "download): docs/benchmarks.md#from-the-hub")


def add_task_args(p: argparse.ArgumentParser, shared: bool = True) -> None:
    """``--task`` and the file shorthand; ``shared=False`` leaves out ``--mapping`` and ``--limit`` (for a
    parser that already has them, as ``eval``'s benchmark options do)."""
    g = p.add_argument_group("task (what to forget and how to check it)")
    g.add_argument("--task", default=None, help="world (default), tofu:forget10, ember:<concept>, wmdp:bio, "
                   "muse:news, rwku:<target> or file:SPEC.yaml")
    g.add_argument("--forget", action="append", metavar="FILE", help="your forget file(s): QA pairs or texts "
                   "(.jsonl .json .csv .tsv .txt); with --retain, builds a task without a spec")
    g.add_argument("--retain", action="append", metavar="FILE", help="your retain file(s)")
    g.add_argument("--utility", action="append", metavar="FILE", help="evaluation file(s) of general ability")
    g.add_argument("--holdout", action="append", metavar="FILE", help="data never trained on")
    g.add_argument("--relearn", action="append", metavar="FILE", help="related texts for the relearning attack")
    if shared:
        g.add_argument("--mapping", action="append", metavar="[FILE=]FIELDS", help=MAPPING_HELP)
    g.add_argument("--template", help="prompt template with {question} (default 'Question: {question}\\nAnswer:')")
    g.add_argument("--chat-template", action="store_true", help="prompt with the tokenizer's chat template")
    if shared:
        g.add_argument("--limit", type=count_arg, help="use only the first N records of every set (quick checks)")
    g.add_argument("--allow-hub", action="store_true", help=ALLOW_HUB_HELP)


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
                                   relearn=args.relearn, mapping=mapping_from_args(args.mapping, task_files(args)),
                                   template=args.template, chat=args.chat_template, limit=limit)
        except FieldsUnknown as e:  # the hint in the command line's syntax
            raise DataError(e.hint(cli=True)) from None
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
    task's files (``--forget`` ... ``--relearn``, the spec of ``--task file:SPEC.yaml``), ``--data``, and ``extra``."""
    paths = [getattr(args, "model", None), getattr(args, "tokenizer", None), getattr(args, "adapter", None),
             getattr(args, "data", None), *extra]
    for flag in ("forget", "retain", "utility", "holdout", "relearn"):
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
    o = Path(out).expanduser().resolve()
    given = [(inp, Path(inp).expanduser().resolve()) for inp in inputs if inp and Path(inp).exists()]
    for inp, i in given:
        if o == i or i in o.parents or o in i.parents:
            what = "directory" if i.is_dir() else "file"
            raise ConfigError(f"--out {out} overlaps the input {what} {inp}: choose a directory outside it, so "
                              "nothing is overwritten")
    for link in _links_under(o):
        t = link.resolve()
        for inp, i in given:
            if t == i or i in t.parents or t in i.parents:
                raise ConfigError(f"--out {out} holds {link}, a symbolic link to the input {inp}: a run would "
                                  "write through it; remove the link or choose another --out")


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
        raise ConfigError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                          f"numbered from 0")
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
    """The tokenizer of ``--tokenizer``, else of the model (``path`` or ``--model``), with ``--pad-policy``; the
    model's path is checked first, so a mistyped ``--model`` is named as the model (not as a missing tokenizer
    directory)."""
    path = path or args.model
    check_model_path(path)
    tok = load_tokenizer(args.tokenizer, of_model=False) if args.tokenizer else load_tokenizer(path, of_model=True)
    return ensure_pad_token(tok, policy=args.pad_policy)


def load_model_args(args, path: str | None = None, trains: bool = True):
    """(model, tokenizer) of ``--model`` (or ``path``), on ``--device`` in ``--dtype``
    (:func:`~obliviate.models.load.load_model_and_tokenizer`); ``--adapter`` attached to ``--model`` (said in one
    line). ``trains``: see :func:`device_and_dtype`."""
    path = path or args.model
    device, dtype = device_and_dtype(args, trains)  # a bad device or dtype fails before the load
    adapter = getattr(args, "adapter", None) if path == args.model else None
    model, tok = load_model_and_tokenizer(path, args.pad_policy, dtype=dtype, tokenizer_path=args.tokenizer,
                                          adapter=adapter)
    if adapter is not None and is_main_process():
        print(f"obliviate: attached the adapter {adapter} to {path} (merged into its weights)", file=sys.stderr)
    return model.to(device).eval(), tok


def warn(msg: str) -> None:
    """``obliviate: warning: MSG`` on stderr, once per run (rank 0 only under a launcher)."""
    if is_main_process():
        print(f"obliviate: warning: {msg}", file=sys.stderr)
