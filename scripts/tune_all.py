"""One tuning budget for every method on the world (issue #59): each method's own search space, the same number
of trials, one selection rule, and the chosen settings committed beside the methods.

For each method, ``obliviate.pipelines.tune.tune`` runs ``--budget`` trials (24; none past the grid's edge) over
the method's documented search space (``search`` at its ``@register``) on the base model ``compare`` pretrains on
world ``--seed``, each trained on all the forget and retain data and scored on the validation items, and chooses
by :data:`~obliviate.pipelines.tune.run.SELECTION_RULE`. The choice goes to
``src/obliviate/methods/tuned/<method>.yaml`` (what ``compare --tuned`` reads) and the table of every finished
method to docs/results.md, between its ``tune_all`` markers, after each method. Each trial is a part under
``OUT/<method>/parts``: a killed run resumes where it stopped. It lowers its own priority (nice 10) and runs on
one thread.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python scripts/tune_all.py --out runs/tune_all
    .venv/bin/python scripts/tune_all.py --out runs/tune_all --methods undo,tar --budget 24
    .venv/bin/python scripts/tune_all.py --out runs/tune_all --table-only
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from obliviate.config import to_dict  # noqa: E402
from obliviate.errors import ConfigError  # noqa: E402
from obliviate.methods import METHODS, method_names, preset_name  # noqa: E402
from obliviate.models.load import load_model, load_tokenizer  # noqa: E402
from obliviate.pipelines.compare.run import compare_settings, method_config, skip_reason  # noqa: E402
from obliviate.pipelines.tune.committed import TUNED_DIR, write_method_tuning  # noqa: E402
from obliviate.pipelines.tune.run import (SELECTION_RULE, TuneConfig, keep_text, setting_text, tune,  # noqa: E402
                                          validation_split)
from obliviate.runs.cache import model_digest  # noqa: E402
from obliviate.runs.results import atomic_write_text  # noqa: E402
from obliviate.tasks import load_task  # noqa: E402
from obliviate.train.pretrain import cached_pretrain  # noqa: E402

DEFAULT_METHODS = ["graddiff", "npo", "simnpo", "rmu", "undo", "tar", "repnoise", "sam_npo", "jensun", "mudman"]
"""The four baselines, then the robust methods the issue compares (a name not registered is left out)."""

BEGIN, END = "<!-- tune_all:begin -->", "<!-- tune_all:end -->"
"""The markers of the table this script writes into docs/results.md."""

ROOT = Path(__file__).resolve().parent.parent


def _f(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(results: list[dict], seed: int, budget: int) -> str:
    """The markdown block (markers included): one row per tuned method."""
    rows = ["| method | trials | chosen settings (trial) | forget score (removed) | retain keep | neighbour keep | "
            "constraint | preset: forget removed, worst keep |", "|" + "---|" * 8]
    for r in results:
        c, first = r["chosen"], r["trials"][0]
        worst = min((v for v in first["keep"].values() if v is not None), default=None)
        rows.append(
            f"| `{r['method']}` | {len(r['trials'])} | {setting_text(c)} ({c['index'] + 1}) | "
            f"{_f(c.get('forget_score'))} ({_f(c['forgot'])}) | {_f(c['keep'].get('retain'))} | "
            f"{_f(c['keep'].get('neighbour'))} | {'met' if r['feasible'] else '**not met: best trade-off**'} | "
            f"{_f(first['forgot'])}, {_f(worst)} |")
    rule = SELECTION_RULE.format(share=results[0]["retain_share"] if results else 0.9)
    intro = (f"World seed {seed}, {budget} trials per method over its own search space (`search` in its file; "
             "docs/methods.md), validation items only; written by `scripts/tune_all.py`, the settings in "
             "`src/obliviate/methods/tuned/<method>.yaml`. Rule: " + rule + ". Scores are the validation split's "
             "(the forget score after, and the share of it removed; each keep share of the base model's); the "
             "last column is the preset's own trial, the run before tuning.")
    return "\n".join([BEGIN, "", *textwrap.wrap(intro, 116, break_on_hyphens=False), "", *rows, "", END])


def write_table(path: Path, block: str) -> None:
    text = path.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block to rewrite")
    atomic_write_text(path, text[:start] + block + text[end + len(END):])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/tune_all", help="where the trials are kept (resumable)")
    p.add_argument("--seed", type=int, default=0, help="world seed")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                   help="comma-separated methods, or 'all' (every training method)")
    p.add_argument("--budget", type=int, default=TuneConfig().budget, help="trials per method")
    p.add_argument("--table-only", action="store_true",
                   help="rewrite the tuned files and the table from the finished methods, running none")
    p.add_argument("--no-write", action="store_true", help="neither the tuned files nor docs/results.md")
    args = p.parse_args(argv)
    if os.nice(0) < 10:
        os.nice(10 - os.nice(0))
    torch.set_num_threads(1)
    names = (method_names() if args.methods == "all" else
             [m.strip() for m in args.methods.split(",") if m.strip()])
    names = [m for m in names if m in method_names() and METHODS[m].kind != "edit"]
    out = Path(args.out)
    tcfg = TuneConfig(budget=args.budget, extend=0)
    if not args.table_only:
        cfg = compare_settings(args.seed)
        task = load_task("world", seed=args.seed, world=to_dict(cfg.pretrain.world))
        root = cached_pretrain(dataclasses.replace(cfg.pretrain, world=task.pretrain))
        model, tok = load_model(root / "model"), load_tokenizer(root / "model")
        preset, digest = preset_name(model), model_digest(model)
        val, _ = validation_split(task, tcfg.val_fraction, tcfg.split_seed)
        for name in names:
            ucfg, _ = method_config(cfg, name, preset)
            why = skip_reason(task, name, ucfg.params)
            if why is not None:
                print(f"tune_all: {name} skipped: {why}", flush=True)
                continue
            t0 = time.time()
            try:
                r = tune(model, tok, val, ucfg, tcfg, out / name, eval_kw={"batch_size": cfg.eval_batch_size},
                         fingerprint={"base": digest, "task": val.summary(), "seed": args.seed},
                         log=lambda line: print(line, flush=True))
            except ConfigError as e:  # no search space, a setting that cannot be scaled: said, the others go on
                print(f"tune_all: {name} not tuned: {e}", flush=True)
                continue
            r["seconds"] = time.time() - t0
            r["tuned_for"] = {"task": "world", "seed": args.seed, "preset": preset, "base": digest}
            atomic_write_text(out / name / "result.json", json.dumps(r, indent=1, default=str))
            c = r["chosen"]
            print(f"tune_all: {name}: {setting_text(c)} (trial {c['index'] + 1} of {len(r['trials'])}): forget "
                  f"removed {c['forgot'] or 0:.3f}, {keep_text(c)}"
                  + ("" if r["feasible"] else "; no trial met the constraint: the best trade-off")
                  + f" ({r['seconds']:.0f} s)", flush=True)
            if not args.no_write:
                _write_all(out, names, args)
    if args.table_only and not args.no_write:
        _write_all(out, names, args)
    return 0


def _write_all(out: Path, names: list[str], args) -> None:
    """Each finished method's tuned file and the table of all of them, from ``OUT/<method>/result.json``."""
    results = [json.loads((out / n / "result.json").read_text()) for n in names
               if (out / n / "result.json").exists()]
    for r in results:
        write_method_tuning(r["method"], r, r["tuned_for"], TUNED_DIR)
    if results:
        write_table(ROOT / "docs" / "results.md", table(results, args.seed, args.budget))


if __name__ == "__main__":
    sys.exit(main())
