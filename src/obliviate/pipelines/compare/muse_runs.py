"""MUSE's six-way evaluation inside ``obliviate compare --task muse:news|books`` (issue #31, item 4).

Every model compare evaluates gets the per-model MUSE metrics (:func:`model_metrics`: VerbMem, KnowMem on the
forget and retain QA with MUSE's few-shot prompts, the Min-40% AUC); after the run, PrivLeak against the
oracle (:func:`finish`), and for each method the scalability folds (``scal/``: each unlearned from the base
model) and the sustainability requests (``sust/``: one after another on the same model), all metrics after
each (:func:`method_folds`, resumable at a fold boundary). :func:`markdown` is the report's MUSE section, in
MUSE's table layout. The metrics themselves are :mod:`obliviate.eval.six_way`'s.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

from obliviate.eval.six_way import MODEL_METRICS, TABLE, muse_privleak
from obliviate.eval.suite import task_metrics
from obliviate.pipelines.sequential import finished_requests, over_requests
from obliviate.unlearning.engine import unlearn
from obliviate.runs.parts import cached_part, kept_part
from obliviate.runs.report import markdown_table, md_escape
from obliviate.tasks.base import Data, Task
from obliviate.train.distributed import save_trained
from obliviate.utils import seed_everything

FOLD_KINDS = {"scal": "scalability: each forget fold unlearned from the base model",
              "sust": "sustainability: the requests one after another on the same model"}
HEADLINE = "muse_knowmem_r"
"""What MUSE plots for scalability and sustainability: utility preservation (KnowMem on D_r) after each
fold."""


def model_metrics(task: Task, model, tokenizer, batch_size: int = 16) -> dict:
    """The MUSE metrics of one model on ``task``: the registered :data:`~obliviate.eval.six_way.MODEL_METRICS`
    whose parts the task has (nothing on a task without ``meta["muse"]``)."""
    return task_metrics(model, tokenizer, task, MODEL_METRICS, batch_size=batch_size)


def _muse_only(m: dict) -> dict:
    return {k: v for k, v in m.items() if k.startswith("muse_") and k not in ("muse_scal", "muse_sust")}


def _digest(docs) -> str:
    return hashlib.sha256(json.dumps(docs).encode()).hexdigest()[:16]


def method_folds(task: Task, name: str, ucfg, base_model, tokenizer, out: Path, key: dict, main: dict, *,
                 main_model_dir: str | None = None, load=None, batch_size: int = 16, seed: int = 0,
                 progress: bool = False) -> dict:
    """``{"muse_scal": [...], "muse_sust": [...]}``: method ``name`` (its run config ``ucfg``) over the task's
    scalability folds and sustainability requests, MUSE's metrics after each
    (:func:`obliviate.pipelines.sequential.over_requests`).

    Fold 1 is the method's own run on the forget set (``main``: its metrics; ``main_model_dir``: its saved
    model, which the second request starts from, else request 1 is run again). Each fold's metrics are a part
    under ``out/muse/<kind>/<name>/`` keyed by ``key``, the folds so far and the method; each request's model
    is kept there too, so a rerun after a kill resumes at the last finished request."""
    muse = task.meta.get("muse") or {}
    res: dict = {}
    for kind in FOLD_KINDS:
        folds = muse.get(kind) or []
        if not folds:
            continue
        sequential = kind == "sust"
        root = out / "muse" / kind / name

        def part_key(k, folds=folds, sequential=sequential):
            seen = [f["docs"] for f in folds if (f["fold"] <= k if sequential else f["fold"] == k)]
            return {**key, "method_run": name, "kind": kind, "fold": k, "docs": _digest(seen)}

        def run_fold(model, docs, k, root=root):
            seed_everything(seed)
            model, _ = unlearn(model, tokenizer, Data(docs=list(docs)), task.retain, ucfg,
                               root / str(k) / "train",
                               prompt=task.prompt, idk=task.idk, progress=progress, resume=False)
            return model

        def evaluate(model, k, root=root, sequential=sequential):
            def make():
                if sequential:  # the next request starts from it, also after a kill
                    save_trained(model, root / str(k) / "model", tokenizer)
                return model_metrics(task, model, tokenizer, batch_size)

            return cached_part(root / f"fold_{k}.json", part_key(k), make)[0]

        done: dict = {}
        first = folds[0]
        if first["fold"] == 1 and first["docs"] == list(task.forget.docs):
            fold1 = _loaded(main_model_dir, load) if sequential else None
            if not sequential or fold1 is not None:
                done[1] = (fold1, _muse_only(main))
        # a resumed run: the requests whose part and model are kept, the next starts from the last
        if sequential:
            done = finished_requests(folds, lambda k, r=root,
                                     pk=part_key: kept_part(r / f"fold_{k}.json", pk(k)),
                                     lambda k, r=root: (r / str(k) / "model" / "config.json").exists(),
                                     lambda k, r=root: _loaded(str(r / str(k) / "model"), load), done=done)
        else:  # each scalability fold stands alone: a kept one is not unlearned again
            for f in folds:
                saved = None if f["fold"] in done else kept_part(root / f"fold_{f['fold']}.json",
                                                                 part_key(f["fold"]))
                if saved is not None:
                    done[f["fold"]] = (None, saved)
        res[f"muse_{kind}"] = over_requests(base_model, folds, run_fold, evaluate, sequential=sequential,
                                            copy_fn=copy.deepcopy, done=done)
    return res


def _loaded(model_dir: str | None, load):
    """The model saved in ``model_dir`` (None where there is none)."""
    if not model_dir or load is None or not (Path(model_dir) / "config.json").exists():
        return None
    return load(model_dir)[0]


def finish(metrics: dict) -> None:
    """PrivLeak of every model against the oracle's Min-40% AUC (also on each fold), and the scalability and
    sustainability headline: utility (KnowMem on D_r) at the largest fold and after the last request."""
    retrain = (metrics.get("oracle") or {}).get("muse_mia_auc")
    for m in metrics.values():
        if "muse_mia_auc" in m:
            m["muse_privleak"] = muse_privleak(m["muse_mia_auc"], retrain)
        for kind in FOLD_KINDS:
            for row in m.get(f"muse_{kind}") or []:
                row["muse_privleak"] = muse_privleak(row.get("muse_mia_auc"), retrain)
            if m.get(f"muse_{kind}"):
                m[f"muse_{kind}_utility"] = m[f"muse_{kind}"][-1].get(HEADLINE)


def _pct(v) -> float | None:
    return None if v is None else 100 * float(v)


def markdown(task: Task, metrics: dict) -> list[str]:
    """The report's MUSE section: MUSE's table (x 100, as MUSE prints it), the scalability and sustainability
    curves, and one line per part that was not computed."""
    muse = task.meta.get("muse")
    if not muse:
        return []
    heads = {"muse_verbmem_f": "VerbMem on D_f (lower)", "muse_knowmem_f": "KnowMem on D_f (lower)",
             "muse_privleak": "PrivLeak (near 0)", "muse_knowmem_r": "KnowMem on D_r (higher)",
             "muse_scal_utility": "scal: KnowMem on D_r, largest fold", "muse_sust_utility":
                 "sust: KnowMem on D_r, last request"}
    cols = ["model", *TABLE, *[c for c in ("muse_scal_utility", "muse_sust_utility")  # MUSE's four always
                                 if any(m.get(c) is not None for m in metrics.values())]]
    rows = [{"model": n, **{heads[c]: _pct(m.get(c)) for c in cols[1:]}} for n, m in metrics.items()
            if any(k.startswith("muse_") for k in m)]
    any_m = next((m for m in metrics.values() if "muse_verbmem_max_new_tokens" in m), {})
    lines = ["## MUSE six-way evaluation", "",
             "MUSE's table (Shi et al. 2024, arXiv:2407.06460), values x 100 as MUSE prints them: ROUGE-L F1 "
             "of the greedy continuation of each verbmem prompt "
             f"({any_m.get('muse_verbmem_max_new_tokens', '-')} new tokens) and of the few-shot KnowMem "
             f"answers ({any_m.get('muse_knowmem_max_new_tokens', '-')} new tokens); PrivLeak = (AUC - "
             "AUC_retrain) / AUC_retrain of Min-40% forget vs holdout in MUSE's AUC, the oracle as the "
             "retrained model (docs/evaluation.md, \"MUSE six-way\").", "",
             markdown_table(rows, [heads.get(c, c) for c in cols], fmt="{:.1f}", missing="-"), ""]
    for kind, title in FOLD_KINDS.items():
        fold_rows = [{"model": n, "fold": r["fold"], "forget documents": r["forget_docs"],
                      **{heads[c]: _pct(r.get(c)) for c in TABLE}}
                     for n, m in metrics.items() for r in m.get(f"muse_{kind}") or []]
        if fold_rows:
            lines += [f"### MUSE {title}", "",
                      markdown_table(fold_rows, ["model", "fold", "forget "
                                                                  "documents", *[heads[c] for c in TABLE]],
                                     fmt="{:.1f}", missing="-"), ""]
    missing = list(muse.get("missing") or [])
    if "oracle" not in metrics:
        missing.append("PrivLeak: not computed, it needs the retrained model's AUC (an oracle: compare "
                       "builds one, or pass --oracle with --model)")
    lines += [f"- {md_escape(x)}" for x in missing]
    return lines + ([""] if missing else [])
