"""The bench case of the controls' cache (issue #56, item 13): a verdict-bearing ``obliviate attack`` on one
base model, run twice with a fresh cache of the controls (:mod:`obliviate.runs.cache`) on two models unlearned
from it; ``second / first`` of their wall seconds is the case's number (target: at most 1/3). The set-up:
docs/bench.md.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from obliviate.errors import InvalidResult
from obliviate.models.builders import TinyModelConfig, build_tiny_model, param_count
from obliviate.models.load import save_model
from obliviate.tasks.world import WorldConfig, generate_world

TARGET = 1 / 3
"""The most the second attack may take, as a share of the first's wall seconds."""
CLI = "from obliviate.cli.main import main; raise SystemExit(main())"


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def user_files(work: Path, seed: int = 0, world: dict | None = None) -> tuple[list[str], list[str]]:
    """``(the file options of a command, every text of them)``: the forget, retain and holdout facts of the
    world (``world``: keys of :class:`~obliviate.world.WorldConfig`) as JSON Lines QA files and its related
    paragraphs as a text file, as a user would give them."""
    world = generate_world(WorldConfig(**{**(world or {}), "seed": seed}))
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    texts = []
    for split in ("forget", "retain", "holdout"):
        rows = [{"question": f["question"], "answer": f["answer"]} for f in world.facts_by_split(split)]
        _write_jsonl(data / f"{split}.jsonl", rows)
        texts += [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in rows]
    related = [p["text"] for p in world.relearn_paragraphs]
    (data / "related.txt").write_text("\n".join(related) + "\n")
    files = ["--forget", str(data / "forget.jsonl"), "--retain", str(data / "retain.jsonl"), "--holdout",
             str(data / "holdout.jsonl"), "--relearn", str(data / "related.txt")]
    return files, texts + related


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], env: dict, log: Path) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of ``obliviate ARGV`` in a fresh process (its output in ``log``); a
    failure is an :class:`InvalidResult` naming the log."""
    t, cpu = time.perf_counter(), _child_cpu()
    with open(log, "w") as f:
        code = subprocess.run([sys.executable, "-c", CLI, *argv], stdout=f, stderr=subprocess.STDOUT,
                              env=env).returncode
    seconds, cpu = time.perf_counter() - t, _child_cpu() - cpu
    if code != 0:
        raise InvalidResult(f"bench: `obliviate {' '.join(argv[:1])}` "
                            f"failed (exit {code}); its output: {log}")
    return seconds, cpu


def measure_control_cache(work: str | Path, *, size: str = "4x128", seed: int = 0,
                          methods: tuple = ("npo", "graddiff"), unlearn_steps: int = 20,
                          extra: list[str] | None = None,
                          world: dict | None = None, progress: bool = False) -> dict:
    """The case (module docstring) in the folder ``work`` (emptied first): each attack's process CPU seconds
    (``first_seconds``, ``second_seconds``: what a neighbouring job cannot inflate, as the step times' clock;
    the processes run one torch thread, so on an idle machine it is their wall time) and their ``ratio``,
    whether it ``meets_target`` (:data:`TARGET`), the wall seconds beside (``first_wall_seconds``,
    ``wall_ratio``), the model's size, each attack's verdict and its controls' cost (built, or found in the
    cache). ``extra``: settings given to both attacks; ``world``: the world's size (:func:`user_files`)."""
    work = Path(work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = {**os.environ, "OBLIVIATE_CACHE": str(work / "cache"), "OMP_NUM_THREADS": "1"}
    files, texts = user_files(work, seed, world)
    model, tok = build_tiny_model(texts, TinyModelConfig.of_size(size), seed=seed)
    save_model(model, work / "random", tok)
    quiet = ["--no-progress"]
    say = (lambda line: print(f"bench: {line}", flush=True)) if progress else (lambda line: None)
    say(f"control cache: set-up ({size}, {param_count(model, non_embedding=False) / 1e6:.2f}M parameters)")
    _run(["finetune", "--model", str(work / "random"), *files, "--out", str(work / "ft"), *quiet], env,
         work / "finetune.log")
    base = str(work / "ft" / "model")
    for m in methods:
        _run(["unlearn", "--model", base, "--method", m, *files, "--out", str(work / m), *quiet,
              f"unlearn.train.steps={unlearn_steps}"], env, work / f"unlearn-{m}.log")
    runs = {}
    for label, m in zip(("first", "second"), methods):
        say(f"control cache: the {label} attack on the base ({m})")
        wall, cpu = _run(["attack", "--model", str(work / m / "model"), "--base", base, *files, "--out",
                        str(work / f"attack-{label}"), "--seed", str(seed), *quiet, *(extra or [])], env,
                       work / f"attack-{label}.log")
        res = json.loads((work / f"attack-{label}" / "results.json").read_text())
        if not res.get("verdict"):
            raise InvalidResult(f"bench: the {label} attack gave no verdict: {res.get('no_verdict')}")
        runs[label] = {"seconds": cpu, "wall_seconds": wall, "model": m, "verdict": res["verdict"]["verdict"],
                       "controls": res["cost"]["controls"], "cost_wall_seconds": res["cost"]["wall_seconds"]}
    if runs["second"]["controls"]["cache"] != "hit":
        raise InvalidResult(f"bench: the second attack did not find its controls in the cache "
                            f"({runs['second']['controls']['cache']}); see {work / 'attack-second.log'}")
    first, second = runs["first"], runs["second"]
    ratio = second["seconds"] / first["seconds"]
    return {"size": size, "params": param_count(model, non_embedding=False), "methods": list(methods),
            "threads": 1,
            "first_seconds": first["seconds"], "second_seconds": second["seconds"], "ratio": ratio,
            "first_wall_seconds": first["wall_seconds"], "second_wall_seconds": second["wall_seconds"],
            "wall_ratio": second["wall_seconds"] / first["wall_seconds"], "target": TARGET,
            "meets_target": bool(ratio <= TARGET), "runs": runs}


def control_cache_text(metrics: dict) -> str:
    """The case's lines of ``bench.md`` (empty without it)."""
    c = metrics.get("control_cache")
    if not c:
        return ""
    return (f"Controls' cache (a verdict-bearing `attack` twice on one base, a {c['size']} model of "
            f"{c['params'] / 1e6:.2f}M parameters, fresh cache, one thread): first {c['first_seconds']:.1f} "
            f"s, second {c['second_seconds']:.1f} s of process CPU time, ratio {c['ratio']:.3f} (target <= "
            f"{c['target']:.3f}: {'met' if c['meets_target'] else 'not met'}); wall "
            f"{c['first_wall_seconds']:.1f} s and {c['second_wall_seconds']:.1f} s, ratio "
            f"{c['wall_ratio']:.3f}.\n")
