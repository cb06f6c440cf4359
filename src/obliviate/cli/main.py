"""Command-line interface: ``obliviate <command> [--config FILE] [key=value ...]``.

Every command that produces results takes ``--out DIR`` and writes
``DIR/results.json`` atomically when, and only when, it has finished.
User errors print one line naming the bad input and exit with status 2.
Each command is one module of this package (``register(subparsers)`` and its ``cmd_*``) that parses its
arguments, calls its pipeline (:mod:`obliviate.pipelines`) and prints; shared options are declared in
:mod:`obliviate.cli.args` and read and checked in :mod:`obliviate.cli.inputs`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import signal
import sys
import warnings

from obliviate.errors import InvalidResult, ObliviateError, command_line


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill PID``, a job scheduler's stop), raised where the process is, as Ctrl-C raises
    ``KeyboardInterrupt``: the same clean-up (the run lock released, the last checkpoint kept to resume
    from)."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _stopped(e: KeyboardInterrupt, note: str = "") -> int:
    """One line for a run stopped by Ctrl-C (status 130) or SIGTERM (status 143)."""
    if isinstance(e, Terminated):
        print(f"obliviate: terminated (SIGTERM){note}", file=sys.stderr)
        return 143
    print(f"obliviate: interrupted{note}", file=sys.stderr)
    return 130


def _handle_sigterm():
    """Raise :class:`Terminated` on SIGTERM from now on; the handler it replaces (None off the main
    thread)."""
    try:
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: signals are not ours to handle
        return None


_previous_sigterm = _handle_sigterm()
# importing the commands loads torch and transformers (seconds): Ctrl-C or SIGTERM meanwhile is one line too
try:
    from obliviate.cli import (attack, bench, compare, demo, eval, finetune, methods, pretrain,
                               probe_directions,
                               reproduce, tasks, tofu, tune, unlearn, verdict_check, world)
    from obliviate.cli.inputs import check_inputs
except KeyboardInterrupt as _e:
    raise SystemExit(_stopped(_e)) from None
finally:
    if _previous_sigterm is not None:
        signal.signal(signal.SIGTERM, _previous_sigterm)


COMMANDS = [world, pretrain, eval, demo, finetune, methods, tasks, unlearn, tune, compare, attack,
            verdict_check,
            probe_directions, tofu, reproduce, bench]
"""The command modules, each with ``register(subparsers)``, in the order ``obliviate --help`` shows them."""


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line (``obliviate eval: error: argument --limit: ...``, then where to
    find its usage) and exit status 2, as every other bad input (the subcommands' parsers are of this class
    too)."""

    def error(self, message: str):
        message = " ".join(str(message).split())
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="obliviate", description="Remove targeted knowledge from language models, "
                      "and prove that it is gone.")
    sub = p.add_subparsers(dest="command", metavar="command")
    for module in COMMANDS:
        module.register(sub)
    return p


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}
"""Errors that mean "the output cannot be written": reported as one line, exit status 2."""


def disk_error(e: BaseException) -> str | None:
    """One line for a full disk / read-only / permission error (an ``OSError``, or safetensors' own error
    carrying ``os error N``); None for anything else."""
    import re

    if isinstance(e, OSError) and e.errno in _DISK_ERRNOS:
        path = e.filename or _file_being_written(e)
        where = f"{path}: " if path else ""
        return f"{where}[Errno {e.errno}] {e.strerror or e}"
    text = " ".join(str(e).split())
    m = re.search(r"os error (\d+)", text)
    if type(e).__name__ == "SafetensorError" and m and int(m.group(1)) in _DISK_ERRNOS:
        return f"safetensors: {text}"
    if isinstance(e, RuntimeError) and ("PytorchStreamWriter" in text or "inline_container.cc" in text):
        return f"torch.save could not write its file (disk full or file too large?): {text}"
    return None


def _file_being_written(e: BaseException) -> str | None:
    """The file an ``OSError`` without a file name (a ``write`` that met a full disk) was writing: the
    innermost frame of its traceback holding an open-file object, or a path as ``self`` / ``path``."""
    import io
    from pathlib import PurePath

    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        values = frame.f_locals
        for value in values.values():
            name = getattr(value, "name", None) if isinstance(value, io.IOBase) else None
            if isinstance(name, (str, bytes)) and not isinstance(name, int):
                return os.fsdecode(name)
        for key in ("self", "path", "file", "filename"):
            if isinstance(values.get(key), PurePath):
                return str(values[key])
    return None


TRAINING_COMMANDS = {"pretrain", "demo", "finetune", "unlearn", "compare", "attack", "tofu", "reproduce"}
"""Commands that run the training loop, so refuse a sharded launch of one process at once."""


def _quiet_deepspeed() -> None:
    """With deepspeed installed, accelerate imports it whenever a model is unwrapped or saved, and deepspeed
    then logs a warning that it picked the CPU; on a machine without CUDA, name the CPU for it
    (``DS_ACCELERATOR``)."""
    import importlib.util

    if "DS_ACCELERATOR" not in os.environ and importlib.util.find_spec("deepspeed") is not None:
        import torch

        if not torch.cuda.is_available():
            os.environ["DS_ACCELERATOR"] = "cpu"


class StderrLines(logging.Handler):
    """The library's log records (loggers ``obliviate.*``; the Python API only logs) as the command line's
    lines on stderr: ``obliviate: MSG``, ``obliviate: warning: MSG`` for a warning. It writes to the
    ``sys.stderr`` of the moment (a test's captured stream too)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            warn = "warning: " if record.levelno >= logging.WARNING else ""
            print(f"obliviate: {warn}{record.getMessage()}", file=sys.stderr)
        except Exception:  # logging's own rule: a record that cannot be written never ends the run
            self.handleError(record)


@contextlib.contextmanager
def log_to_stderr():
    """Within it, the ``obliviate`` loggers' records down to INFO are shown on stderr (:class:`StderrLines`):
    what one command says."""
    logger, handler = logging.getLogger("obliviate"), StderrLines()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


LIBRARIES = (r"(transformers|torch|accelerate|peft|huggingface_hub|tokenizers|safetensors|datasets|lm_eval)"
             r"(\.|$)")
"""The libraries whose own Python warnings a command does not show (matched against the warning's module)."""


@contextlib.contextmanager
def quiet_libraries():
    """Within it, the libraries' notices are not shown: their ``FutureWarning``s and ``DeprecationWarning``s
    (about their APIs, which obliviate calls, not about the user's run), any other warning they raise, and the
    notices of the ``transformers`` and ``huggingface_hub`` loggers (tokenizer length notices, generation
    settings, hub retries) below ERROR. obliviate's own warnings (an input cut to the model's context, a chat
    template not used) and log records still show: they concern the run."""
    from huggingface_hub.utils import logging as hub_logging
    from transformers.utils import logging as hf_logging

    levels = hf_logging.get_verbosity(), hub_logging.get_verbosity()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", module=LIBRARIES)
        hf_logging.set_verbosity_error()
        hub_logging.set_verbosity_error()
        try:
            yield
        finally:
            hf_logging.set_verbosity(levels[0])
            hub_logging.set_verbosity(levels[1])


def stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (progress bars are shown only there: a log file or a pipe gets none)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. Ctrl-C at any point, start-up (importing torch) included, is one
    line, ``obliviate: interrupted``, and status 130; SIGTERM the same, ``obliviate: terminated (SIGTERM)``,
    status 143 (:class:`Terminated`)."""
    previous = _handle_sigterm()
    try:
        with command_line():  # a message names --allow-hub, not allow_hub=True (obliviate.errors.setting)
            return _main(argv)
    except KeyboardInterrupt as e:
        return _stopped(e)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    # key=value overrides may follow options (``reproduce NAME --out DIR k=v``): argparse binds a
    # command's positionals in one go, so overrides after an option come back as extras.
    args, extra = parser.parse_known_args(argv)
    if extra:
        if hasattr(args, "overrides") and all("=" in a and not a.startswith("-") for a in extra):
            args.overrides = list(args.overrides or []) + extra
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "fn", None):
        parser.print_help()
        return 0
    if getattr(args, "no_progress", None) is False and not stderr_is_terminal():
        args.no_progress = True  # progress bars only on a terminal
    quiet_hf = getattr(args, "no_progress", False) and _hf_progress_bars(False)
    try:
        if getattr(args, "log_with", None):
            # obliviate.train loads torch: not for --help
            from obliviate.train.trackers import set_default_trackers

            set_default_trackers([t.strip() for t in args.log_with.split(",") if t.strip()])
        _quiet_deepspeed()
        if args.command in TRAINING_COMMANDS:
            from obliviate.train.distributed import check_launch  # loads torch: not for --help

            check_launch()  # before any model is loaded
        from obliviate.utils import recording_inputs  # (loads torch: not for --help)

        with recording_inputs():  # every data file the command reads, with its SHA-256: its results and cards
            # the one validation boundary: every value the user gave, before the command runs
            check_inputs(args)
            # what obliviate logs is the command's to say; the libraries' not
            with log_to_stderr(), quiet_libraries():
                args.fn(args)
    except KeyboardInterrupt as e:
        return _stopped(e, _moved_note(args))
    except ObliviateError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, InvalidResult):  # results.json says invalid, and why, instead of any score
            from obliviate.runs.results import write_invalid_results

            write_invalid_results(getattr(args, "out", None), msg)
        print(f"obliviate: error: {msg}{_moved_note(args)}", file=sys.stderr)
        return 2
    # a full disk or an unwritable directory met mid-run (checkpoints, model files, logs)
    except Exception as e:
        msg = disk_error(e)
        if msg is None:
            raise
        print(f"obliviate: error: {msg}{_moved_note(args)}", file=sys.stderr)
        return 2
    finally:
        if quiet_hf:
            _hf_progress_bars(True)
    note = _moved_note(args)
    if note:
        print(f"obliviate: {note[2:-1]}", file=sys.stderr)
    return 0


def _moved_note(args) -> str:
    """`` (the previous run's results.json and model moved to OUT/previous/)`` when this run moved them aside
    (:func:`obliviate.runs.results.prepare_out_dir`), else ``""``: said once, in the run's last line."""
    if "obliviate.runs.results" not in sys.modules:  # nothing prepared (and no torch to load for saying so)
        return ""
    from obliviate.runs.results import moved_previous

    note = moved_previous(getattr(args, "out", None))
    return f" ({note})" if note else ""


def _hf_progress_bars(on: bool) -> bool:
    """Turn the Hugging Face progress bars (weight loading and writing) on or off; say whether they were
    on."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if on else hf_logging.disable_progress_bar)()
    return was


if __name__ == "__main__":
    sys.exit(main())
