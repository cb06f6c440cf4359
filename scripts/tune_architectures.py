"""Acceptance run of issue #29: do the methods' defaults plus ``unlearn --tune`` transfer to a user's model?

For each architecture: a random-init model with a BPE tokenizer of its own (trained on the files' text), saved as a
user would have it; ``obliviate finetune`` on two user QA files (``--n-forget`` forget and ``--n-retain`` retain
pairs of fictitious facts, JSON Lines); then ``obliviate unlearn --tune`` with each method. ``unlearn --tune``
chooses lr, steps and the method's own weight on the validation half of the pairs (``tune.budget`` grid trials, plus
at most ``tune.extend`` past the grid's edge)
and reports on the held-out half only. A run passes when, on the held-out items, the forget score is at most half
the base model's and the retain score at least 0.9 of the base's.

Everything goes through the command line, as a user would run it. Writes ``OUT/summary.md`` and
``OUT/summary.json`` (one row per architecture and method, with the wall time of each step).

    OMP_NUM_THREADS=1 .venv/bin/python scripts/tune_architectures.py --out /tmp/tune_arch --archs llama
    OMP_NUM_THREADS=1 .venv/bin/python scripts/tune_architectures.py --out /tmp/tune_arch   # all four
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ARCHS = ("llama", "gpt2", "qwen2", "gemma2", "mistral", "gptneox")
METHODS = ("rmu", "npo", "graddiff")

_SYL = ["ka", "lo", "mi", "ren", "tu", "sa", "vor", "el", "dra", "qui", "zan", "po", "bel", "ix", "nor", "fe",
        "gar", "tho", "lin", "my", "osk", "ur", "pe", "wyn"]
_RELATIONS = [("Where was {n} born?", "in {w}"), ("What does {n} make?", "{w} cloth"),
              ("Who taught {n}?", "Master {W}"), ("What is the pet of {n}?", "a {w}")]


def _word(rng: random.Random, k: int = 3) -> str:
    return "".join(rng.choice(_SYL) for _ in range(k))


def make_facts(n: int, seed: int) -> list[dict]:
    """``n`` QA pairs about fictitious people, each answer a made-up word (chance of a guess ~0)."""
    rng = random.Random(seed)
    names, out = set(), []
    while len(out) < n:
        name = _word(rng, 2).capitalize() + " " + _word(rng, 2).capitalize()
        if name in names:
            continue
        names.add(name)
        q, a = _RELATIONS[len(out) % len(_RELATIONS)]
        w = _word(rng)
        out.append({"question": q.format(n=name), "answer": a.format(w=w, W=w.capitalize())})
    return out


def write_files(root: Path, n_forget: int, n_retain: int, seed: int) -> tuple[Path, Path, list[str]]:
    facts = make_facts(n_forget + n_retain, seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, part in (("forget", facts[:n_forget]), ("retain", facts[n_forget:])):
        p = root / f"{name}.jsonl"
        p.write_text("".join(json.dumps(f) + "\n" for f in part))
        paths.append(p)
    texts = [f"Question: {f['question']}\nAnswer: {f['answer']}" for f in facts] * 4
    return paths[0], paths[1], texts


def save_base(directory: Path, arch: str, texts: list[str], seed: int, d_model: int, n_layer: int) -> None:
    from obliviate.models.builders import tiny_random
    from obliviate.models.load import save_model
    from obliviate.models.tokenizer import train_tokenizer

    tok = train_tokenizer(texts, vocab_size=600)
    model = tiny_random(arch, vocab_size=len(tok), seed=seed, d_model=d_model, n_layer=n_layer, max_len=256,
                        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    save_model(model, directory)
    tok.save_pretrained(str(directory))


def obliviate(*args: str, log: Path) -> float:
    """Run ``obliviate ARGS`` (this Python's), its output to ``log``; the wall time in seconds."""
    exe = Path(sys.executable).with_name("obliviate")
    cmd = [str(exe) if exe.exists() else "obliviate", *args, "--no-progress"]
    t = time.time()
    with open(log, "w") as fh:
        r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if r.returncode:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")
    return time.time() - t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--n-forget", type=int, default=32)
    ap.add_argument("--n-retain", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--budget", type=int, default=12, help="tune.budget: most trials per method")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-share", type=float, default=0.5, help="pass: forget after <= this share of the base's")
    ap.add_argument("--retain-share", type=float, default=0.9, help="pass: retain after >= this share of the base's")
    a = ap.parse_args(argv)
    out = Path(a.out)
    forget, retain, texts = write_files(out / "data", a.n_forget, a.n_retain, a.seed)
    rows, t_all = [], time.time()
    for arch in a.archs.split(","):
        d = out / arch
        d.mkdir(parents=True, exist_ok=True)
        if not (d / "base" / "config.json").exists():
            save_base(d / "base", arch, texts, a.seed, a.d_model, a.n_layer)
        data = ["--forget", str(forget), "--retain", str(retain), "--seed", str(a.seed)]
        t_ft = 0.0
        if not (d / "taught" / "results.json").exists():
            t_ft = obliviate("finetune", "--model", str(d / "base"), *data, "--out", str(d / "taught"),
                             log=d / "finetune.log")
        for m in a.methods.split(","):
            run = d / m
            t = 0.0
            if not (run / "results.json").exists():
                t = obliviate("unlearn", "--method", m, "--tune", "--model", str(d / "taught" / "model"), *data,
                              "--out", str(run), f"tune.budget={a.budget}", log=d / f"{m}.log")
            res = json.loads((run / "results.json").read_text())
            before, after = res["metrics"]["base"], res["metrics"][m]
            fb, fa, rb, ra = (before["forget_score"], after["forget_score"], before["retain_score"],
                              after["retain_score"])
            ok = fa <= a.max_share * fb + 1e-9 and ra >= a.retain_share * rb - 1e-9
            s = res["tune"]["settings"]["unlearn"]
            c = res["tune"]["chosen"]
            rows.append({"arch": arch, "method": m, "forget_base": fb, "forget_after": fa, "retain_base": rb,
                         "retain_after": ra, "pass": ok, "outcome": res["unlearn_outcome"]["outcome"],
                         "lr": s["train"]["lr"], "steps": s["train"]["steps"],
                         "param": c["param"], "value": c["value"], "feasible_on_validation": res["tune"]["feasible"],
                         "trials": len(res["tune"]["trials"]), "seconds": round(t, 1),
                         "finetune_seconds": round(t_ft, 1)})
            r = rows[-1]
            print(f"{arch} {m}: forget {fb:.2f} -> {fa:.2f}, retain {rb:.2f} -> {ra:.2f}, "
                  f"{'PASS' if ok else 'FAIL'} ({r['outcome']}; lr {r['lr']:.3g}, steps {r['steps']}"
                  + (f", {r['param']} {r['value']:.3g}" if r["param"] else "") + f"; {t:.0f} s)", flush=True)
    total = time.time() - t_all
    (out / "summary.json").write_text(json.dumps({"rows": rows, "seconds": round(total, 1), "args": vars(a),
                                                  "threads": os.environ.get("OMP_NUM_THREADS")}, indent=2))
    head = "| arch | method | forget base -> after | retain base -> after | pass | outcome | chosen | s |"
    lines = [f"# unlearn --tune across architectures (budget {a.budget} grid trials + at most 4 past its edge; "
             f"{a.n_forget} + {a.n_retain} pairs; d_model {a.d_model}, {a.n_layer} layers; held-out half reported)",
             "", head, "|" + "---|" * 8]
    for r in rows:
        chosen = f"lr {r['lr']:.3g}, steps {r['steps']}" + (f", {r['param']} {r['value']:.3g}" if r["param"] else "")
        lines.append(f"| {r['arch']} | {r['method']} | {r['forget_base']:.2f} -> {r['forget_after']:.2f} | "
                     f"{r['retain_base']:.2f} -> {r['retain_after']:.2f} | {'yes' if r['pass'] else 'no'} | "
                     f"{r['outcome']} | {chosen} | {r['seconds']:.0f} |")
    lines += ["", f"Total wall time {total:.0f} s."]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print(f"{sum(r['pass'] for r in rows)} of {len(rows)} pass; {total:.0f} s; {out / 'summary.md'}")


if __name__ == "__main__":
    main()
