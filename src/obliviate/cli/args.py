"""The options the commands share, declared: ``--out``/``--seed``/``--config`` and overrides
(:func:`add_common`), ``--model``, ``--task`` and the file shorthand, the ``eval.*`` options, and the argparse
types of their numbers. What the user gave is checked and read in :mod:`obliviate.cli.inputs`.
"""
from __future__ import annotations

import argparse
import math
import sys

from obliviate.train.distributed import is_main_process


def seed_arg(text: str) -> int:
    """``--seed``: an integer in ``[0, 2**32)`` (the range of :func:`obliviate.utils.check_seed`), checked
    by argparse, so a bad seed fails before anything runs."""
    try:
        value = int(text)
    except ValueError:  # not an integer, or more digits than int() converts
        value = None
    if value is None or not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError("expected an integer in [0, 2**32) = "
                                         f"[0, {2**32 - 1}], got {_shown(text)}")
    return value


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 80 else f"{text[:80]!r}... ({len(text)} characters)"


def count_arg(text: str) -> int:
    """A count option (``--limit``, ``--batch-size``, ``--max-new-tokens``): an integer >= 1, checked by
    argparse."""
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


def add_common(p: argparse.ArgumentParser, out_required: bool = True,
               example: str = "train.steps=100") -> None:
    p.add_argument("--out", required=out_required, help="run directory (results.json is written here last)")
    p.add_argument("--seed", type=seed_arg, default=0, help="seed of the run and, unless overridden, of the "
                   "world: an integer in [0, 2**32)")
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars (they are shown only when "
                                                              "stderr is a terminal: a log "
                                                              "file or a pipe gets none)")
    p.add_argument("--log-with", metavar="TRACKERS", help="also log every training loop to these experiment "
                   "trackers (comma-separated): tensorboard, mlflow, wandb")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, "
                                                                     f"e.g. {example}")


def add_cache_arg(p: argparse.ArgumentParser) -> None:
    """``--no-cache``: build the controls in this run instead of reusing them
    (:mod:`obliviate.runs.cache`)."""
    p.add_argument("--no-cache", action="store_true", help="build the controls and attack them in this run, "
                   "neither reusing nor keeping them in the cache shared by every run directory "
                   "($OBLIVIATE_CACHE/controls, else $XDG_CACHE_HOME/obliviate/controls, else "
                   "~/.cache/obliviate/controls; delete that folder to clear it; config key cache=false)")


def no_cache(args) -> list[str]:
    """The overrides of ``args``, with ``cache=false`` last under ``--no-cache`` (so it wins over the
    config)."""
    given = list(getattr(args, "overrides", None) or [])
    return [*given, "cache=false"] if getattr(args, "no_cache", False) else given


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
    p.add_argument("--adapter", metavar="DIR", help="a peft (LoRA) adapter directory to attach to the model, "
                                                    "merged into its weights (it may be the model's own "
                                                    "directory; without --adapter, a model directory that "
                                                    "holds adapter_config.json is refused)")
    p.add_argument("--pad-policy", choices=["error", "eos"], default="error",
                   help="what to do when the tokenizer has no pad token (eos: pad with eos)")
    p.add_argument("--device", help="cpu, cuda, cuda:1, mps (default: cuda when available, else cpu)")
    p.add_argument("--dtype", help="float32, bfloat16 or float16 (default: as saved)")


def add_eval_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-size", type=count_arg, dest="eval_batch_size", help="evaluation "
    "batch size (default 32)")
    p.add_argument("--max-new-tokens", type=count_arg, help="greedy tokens per QA answer (default: the "
                                                            "longest reference answer plus 4)")


MAPPING_HELP = ("field mapping of those files: question=prompt,answer=target for every file, or "
                "FILE=question=prompt,answer=target for one file (FILE: its path or name, or a set: forget, "
                "retain, utility, holdout, relearn); repeatable, a file's "
                "own mapping wins over its set's and the common one")
"""``--mapping``'s help (the file shorthand's and ``eval --data``'s)."""

FILE_SETS = ("forget", "retain", "utility", "holdout", "relearn")
"""The shorthand's sets of files, in the order of their options (each given once or more: ``--forget A
--forget B``)."""


ALLOW_HUB_HELP = ("read a benchmark file the data directory lacks from the Hugging Face hub with `datasets` "
                  "(tofu, muse, wmdp, rwku, benchmark:*; $HF_ENDPOINT, cached under $HF_HOME; one line on "
                  "stderr names each download): docs/benchmarks.md#from-the-hub; for attack and compare, "
                  "also let a hub model that a model card names as the untaught model come from the hub when "
                  "it is not in the local hub cache")


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
    g.add_argument("--relearn", action="append", metavar="FILE", help="related texts for "
                                                                      "the relearning attack")
    if shared:
        g.add_argument("--mapping", action="append", metavar="[FILE=]FIELDS", help=MAPPING_HELP)
    g.add_argument("--template", help="prompt template with {question} (default "
                                      "'Question: {question}\\nAnswer:')")
    g.add_argument("--chat-template", action="store_true", help="prompt with the tokenizer's chat template")
    if shared:
        g.add_argument("--limit", type=count_arg, help="use only the first N records "
                                                       "of every set (quick checks)")
    g.add_argument("--allow-hub", action="store_true", help=ALLOW_HUB_HELP)


def warn(msg: str) -> None:
    """``obliviate: warning: MSG`` on stderr, once per run (rank 0 only under a launcher)."""
    if is_main_process():
        print(f"obliviate: warning: {msg}", file=sys.stderr)
