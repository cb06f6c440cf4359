"""Sequential unlearning: ``obliviate unlearn --requests A.jsonl,B.jsonl,...`` (issue #31, item 5).

The requests are applied in order to the same model, every metric and the attacks' cheap subset
(:data:`CHEAP_ATTACKS`) evaluated after each; each finished request is a part, so a killed run resumes at the
last one. The loop is the one MUSE's sustainability folds use, :func:`over_requests`. docs/tasks.md,
"Sequential unlearning".
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from obliviate.attacks.attack import ATTACKS
from obliviate.config import to_dict
from obliviate.errors import ConfigError, DataError
from obliviate.eval.outcome import unlearn_outcome
from obliviate.eval.suite import PRIMARY, evaluate_task, knows_forget_set
from obliviate.evidence.harness import TaskAttackConfig, announce_skipped, enabled_attacks, run_task_attacks
from obliviate.models.load import load_model
from obliviate.runs.card import write_model_card
from obliviate.runs.cost import CostRecord, cost_line
from obliviate.runs.parts import cached_part, kept_part
from obliviate.runs.report import markdown_table, md_escape, plot_recovery_curves
from obliviate.runs.results import atomic_write_json, prepare_out_dir, write_results
from obliviate.tasks.base import Data, Task
from obliviate.tasks.files import FieldsUnknown, task_from_files
from obliviate.train.distributed import is_main_process, save_trained
from obliviate.unlearning.engine import check_unlearn_run, unlearn
from obliviate.utils import atomic_write_text, file_sha256, seed_everything

CHEAP_ATTACKS = ("quantize", "logit_lens", "ablate", "in_context")
"""The attacks run after each request: those that cost about one evaluation of the task each (no
relearning)."""

CURVE_KEYS = ("forget_score", "retain_score", "utility_score")
"""The task's role scores, drawn in the curve beside each request's own score."""

ATTACK_KEYS = ("quantize_forget_score", "ablate_forget_score", "logit_lens_top1", "in_context_acc")
"""Each cheap attack's headline in the curve: the forget score of the quantized model (the worst scheme) and
with the direction ablated, the logit lens's top-1 share of answer tokens, the best in-context prompting's
accuracy."""


# ------------------------------------------------------------------ the loop over requests (MUSE's scal/sust
# too)

def over_requests(model, folds: Sequence[dict], unlearn_fn: Callable, evaluate_fn: Callable, *,
                  sequential: bool, copy_fn: Callable | None = None, done: dict | None = None) -> list[dict]:
    """Scalability (``sequential=False``: each fold unlearned from ``model`` afresh) or sustainability
    (``sequential=True``: fold k unlearned from the model after fold k-1, MUSE's ``sust``): the metrics after
    each fold, ``[{"fold": k, "forget_docs": n, **evaluate_fn(model_k)}]``.

    The seam to a run: ``unlearn_fn(model, docs, fold) -> model`` does the unlearning (the caller's method,
    its data and its checkpoints), ``evaluate_fn(model, fold) -> dict`` the metrics; ``copy_fn(model)`` gives
    the fresh copy each scalability fold starts from (``copy.deepcopy`` by default). ``done`` maps a fold to
    ``(model, metrics)`` already made (a resumed run, or fold 1 = the method's own run), used as they are; its
    model may be None where no later fold starts from it (:func:`finished_requests` makes it after a kill).
    Also the loop of ``obliviate unlearn --requests``.
    """
    copy_fn = copy_fn or copy.deepcopy
    done = done or {}
    out, cur = [], model
    for f in folds:
        k, docs = f["fold"], f["docs"]
        if k in done:
            nxt, m = done[k]
        else:
            if sequential and cur is None:
                raise DataError(f"MUSE sustainability: request {k} needs "
                                "the model after the request before it")
            nxt = unlearn_fn(cur if sequential else copy_fn(model), docs, k)
            m = evaluate_fn(nxt, k)
        out.append({"fold": k, "forget_docs": len(docs), **m})
        if sequential:
            cur = nxt
    return out


def finished_requests(folds: Sequence[dict], kept_fn: Callable, has_model_fn: Callable, load_fn: Callable, *,
                      done: dict | None = None) -> dict:
    """The ``done`` of a sequential :func:`over_requests` run resumed after a kill: ``done`` (what the caller
    has already) and the longest run of the next requests whose result ``kept_fn(k)`` still has (a dict, else
    None), cut back to the last one whose model was saved (``has_model_fn(k)``); that one's model is
    ``load_fn(k)``, so the next request starts from it. Shared by MUSE's sustainability folds and ``obliviate
    unlearn --requests``."""
    done = dict(done or {})
    kept = []
    for f in folds:
        if f["fold"] in done:
            continue
        saved = kept_fn(f["fold"])
        if saved is None:
            break
        kept.append((f["fold"], saved))
    while kept and not has_model_fn(kept[-1][0]):
        kept.pop()
    for k, saved in kept:
        done[k] = (None, saved)
    if kept:
        done[kept[-1][0]] = (load_fn(kept[-1][0]), kept[-1][1])
    return done


@dataclasses.dataclass
class Request:
    """One unlearning request: its file, the forget data it holds and its evaluation sets (role ``extra``)."""

    index: int
    path: Path
    data: Data
    evals: list
    idk: list | None = None

    @property
    def name(self) -> str:
        return self.path.name


def request_paths(spec: str, forget: list[str] | None = None) -> list[Path]:
    """The request files of ``--requests A,B,...`` in order; one-line errors for an empty entry, a missing
    file, a file named twice (or two files of the same bytes) and a ``--forget`` that is not the requests'
    files (with ``--requests`` the forget data are the requests; ``--forget`` may only repeat them)."""
    names = [s.strip() for s in str(spec).split(",")]
    if not any(names):
        raise ConfigError("--requests: no request file named (give A.jsonl,B.jsonl,...)")
    if "" in names:
        raise ConfigError(f"--requests {spec!r}: an empty entry between commas (give A.jsonl,B.jsonl,...)")
    paths, seen = [], {}
    for n in names:
        p = Path(n).expanduser()
        if not p.is_file():
            raise DataError(f"--requests: request file not found: {p}")
        real = str(p.resolve())
        if real in seen:
            raise ConfigError(f"--requests: {n} is named twice (as {seen[real]} "
                              "too): each request is one file, once")
        seen[real] = n
        paths.append(p)
    digests: dict = {}
    for p in paths:  # the same request under two names would be unlearned twice
        d = file_sha256(p)
        if d in digests:
            raise ConfigError(f"--requests: {p} holds the same data as "
                              f"{digests[d]}: each request is given once")
        digests[d] = p
    if forget:
        extra = [f for f in forget if str(Path(f).expanduser().resolve()) not in seen]
        if extra or len(forget) != len(paths):
            raise ConfigError(f"--forget {extra[0] if extra else forget[0]} conflicts with --requests: with "
                              "--requests the forget data are the request files, in order (drop --forget)")
    return paths


def read_requests(paths: list[Path], *, mapping=None, template=None, chat: bool = False,
                  limit: int | None = None) -> list[Request]:
    """Each request file read as a forget file of a user's task
    (:func:`~obliviate.tasks.files.task_from_files`; ``mapping``: one for every file, or ``{str(path):
    mapping}``), its evaluation sets renamed ``request<k>_<kind>`` with role ``extra``; an empty file is one
    line naming it."""
    out = []
    for k, p in enumerate(paths, start=1):
        try:
            t = task_from_files([str(p)],
                                mapping=mapping.get(str(p)) if isinstance(mapping, dict) else mapping,
                                template=template, chat=chat, limit=limit, name=f"request{k}")
        except FieldsUnknown:
            raise  # it names the file, and the caller says how to name its fields
        except DataError as e:
            raise DataError(f"--requests: request {k} ({p}): {e}") from None
        evals = [dataclasses.replace(es, name=f"request{k}_{es.kind}", role="extra")
                 for es in t.evals if es.role == "forget"]
        out.append(Request(k, p, t.forget, evals, t.idk))
    return out


def with_requests(task: Task, requests: list[Request]) -> Task:
    """``task`` with the requests' evaluation sets added (and, where the task's forget data are not the
    requests' own, their union as its forget data: the task's other evaluation sets and its retain data
    stay)."""
    union = Data(qa=[x for r in requests for x in r.data.qa], docs=[x for r in requests for x in r.data.docs])
    same = task.forget.qa == union.qa and task.forget.docs == union.docs
    return dataclasses.replace(task, evals=[*task.evals, *[es for r in requests for es in r.evals]],
                               **({} if same else {"forget": union, "groups": None, "halves": None}))


def attack_config(seed: int) -> TaskAttackConfig:
    """The cheap subset of the attack harness (:data:`CHEAP_ATTACKS`), seeded."""
    return TaskAttackConfig(select=[a for a in CHEAP_ATTACKS if a in ATTACKS], seed=seed)


def request_fingerprint(requests: list[Request]) -> list[dict]:
    """Each request's index, file name and SHA-256 (what a resumed run must find unchanged)."""
    return [{"request": r.index, "file": r.name, "sha256": file_sha256(r.path)} for r in requests]


def start(root: Path, fingerprint: dict) -> str | None:
    """Keep ``root``'s parts when they were made by a run of the same ``fingerprint`` (``{"requests", ...}``),
    else delete them; the one line that says why a run starts afresh (None when it resumes or is new)."""
    path = root / "run.json"
    fp = json.loads(json.dumps(fingerprint, default=str))
    why = None
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = {}
        if old != fp:
            if old.get("requests") != fp["requests"]:
                why = "other request files (or edited ones)"
            else:
                diff = sorted(k for k in set(old) | set(fp) if old.get(k) != fp.get(k))
                why = f"other settings ({', '.join(diff)})"
            for child in root.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, fp)
    return None if why is None else f"obliviate: {root} holds a sequential run over {why}; starting afresh"


def run_requests(model, tokenizer, task: Task, requests: list[Request], ucfg, out: Path, *, fingerprint: dict,
                 seed: int = 0, eval_kw: dict | None = None, progress: bool = False, log=None,
                 cost: CostRecord | None = None) -> dict:
    """The requests in order on ``model`` (in place), every metric after each; the parts under
    ``out/sequential``. ``cost``: where each stage's passes, tokens and seconds go (``evaluate:before``,
    ``unlearn:request<k>``, ``evaluate:request<k>``; a part a resumed run finds made spends nothing).

    Returns ``{"model", "before", "rows"}``: the model after the last request, the base model's metrics
    (request 0) and one row of metrics per request (``{"request", "file", "forget_items", **metrics}``)."""
    log = log or (lambda line: print(line, file=sys.stderr))
    cost = cost if cost is not None else CostRecord()
    eval_kw = dict(eval_kw or {})
    for r in requests:  # each request's data and lengths against this model, before anything runs
        check_unlearn_run(model, tokenizer, r.data, task.retain, ucfg, prompt=task.prompt)
    task = with_requests(task, requests)
    root = out / "sequential"
    fp = {**fingerprint, "requests": request_fingerprint(requests)}
    why = start(root, fp)
    if why:
        log(why)
    acfg = attack_config(seed)
    applies = bool(enabled_attacks(task, acfg))
    announce_skipped(task, acfg)  # the cheap attacks this task has no data for, a line each

    def metrics_of(m, base_score=None) -> dict:
        res = evaluate_task(m, tokenizer, task, **eval_kw)
        if applies:
            res.update(run_task_attacks(m, tokenizer, task, acfg, metrics=res, base_score=base_score))
        return res

    def part_key(k: int) -> dict:
        return {"request": k, "requests": fp["requests"][:k]}

    with cost.stage("evaluate:before", model):
        before = cached_part(root / "request_0.json", part_key(0), lambda: metrics_of(model))[0]
    base_score = before.get("forget_score")
    if knows_forget_set(before) is False:
        base_score = None  # the attacks' steps-to-base have no target (they warn once, on the base model)
        log(f"obliviate: warning: the base model does not know the forget set: forget score "
            f"{before['forget_score']:.3f} (chance {before.get('forget_chance', 0.0):.3f}); "
            "unlearning it shows nothing")

    def unlearn_fn(m, items, k):
        r = requests[k - 1]
        seed_everything(seed)
        t = time.perf_counter()
        m, summary = unlearn(m, tokenizer, r.data, task.retain, ucfg, root / str(k) / "train",
                             prompt=task.prompt,
                             idk=r.idk or task.idk, progress=progress, resume=True)
        # the method's own count
        cost.add(f"unlearn:request{k}", summary.get("passes"), time.perf_counter() - t)
        state["model"] = m
        return m

    def evaluate_fn(m, k):
        def make():
            # the next request starts from it, also after a kill
            save_trained(m, root / str(k) / "model", tokenizer)
            return metrics_of(m, base_score)

        with cost.stage(f"evaluate:request{k}", m):
            res = cached_part(root / f"request_{k}.json", part_key(k), make)[0]
        shutil.rmtree(root / str(k - 1), ignore_errors=True)  # request k's part is written: k-1 is not needed
        return res

    state: dict = {}
    folds = [{"fold": r.index, "docs": [*r.data.qa, *r.data.docs]} for r in requests]
    p = next(model.parameters())
    done = finished_requests(folds, lambda k: kept_part(root / f"request_{k}.json", part_key(k)),
                             lambda k: (root / str(k) / "model" / "config.json").exists(),
                             lambda k: load_model(root / str(k) / "model", dtype=p.dtype, device=p.device))
    if done:  # a resumed run: the next request starts from the last finished one's model
        k = max(done)
        log(f"obliviate: resuming after request {k} of {len(requests)} ({requests[k - 1].name})")
    rows = over_requests(model, folds, unlearn_fn, evaluate_fn, sequential=True, done=done)
    for r, row in zip(requests, rows):
        row["request"] = row.pop("fold")
        row["forget_items"] = row.pop("forget_docs")
        row["file"] = r.name
    # run now, or kept on disk (a finished run)
    last = state.get("model", done.get(len(requests), (None,))[0])
    return {"model": last, "before": before, "rows": rows}


def request_score_key(r: Request) -> str | None:
    """The metric of request ``r``'s own evaluation set drawn in the curve (exact match of its QA pairs, else
    the loss of its texts)."""
    for es in r.evals:
        return f"{es.name}_{PRIMARY.get(es.kind, 'loss')}"
    return None


def curve_columns(requests: list[Request], rows: list[dict]) -> list[str]:
    """The curve's columns: the task's role scores, each request's own score, each cheap attack's headline."""
    cols = [k for k in CURVE_KEYS if any(isinstance(r.get(k), float) for r in rows)]
    cols += [k for k in (request_score_key(r) for r in requests) if k]
    return cols + [k for k in ATTACK_KEYS if any(isinstance(r.get(k), (int, float)) for r in rows)]


def curve(before: dict, requests: list[Request], rows: list[dict]) -> list[dict]:
    """One row per point (0: the base model, k: after request k) with the curve's columns."""
    points = [{"request": 0, "file": "(base model)", **before}, *rows]
    cols = curve_columns(requests, points)
    return [{"request": p["request"], "file": p["file"], **{c: p.get(c) for c in cols}} for p in points]


def write_report(out: Path, method: str, task: Task, requests: list[Request], points: list[dict]) -> Path:
    """``out/report.md``: the curve as a table and a plot (``out/sequential.png``: metric vs request
    index)."""
    cols = [c for c in points[0] if c not in ("request", "file")]
    png = plot_recovery_curves({c: [[p["request"], p[c]] for p in points if isinstance(p.get(c), float)]
                                for c in cols if not c.endswith("_loss")}, out / "sequential.png",
                               xlabel="requests applied", ylabel="score",
                               title=f"{method} on {task.name}: {len(requests)} requests in order",
                               empty="no score to draw")
    lines = [f"# Sequential unlearning: {method} on {md_escape(task.name)}", "",
             f"{len(requests)} unlearning requests applied in order to the same model (the retain data the "
             "task's); every metric after each (request 0: the base model), the cheap attacks "
             f"({', '.join(CHEAP_ATTACKS)}) included where the task has their data. `request<k>_*` is "
             "request k's own forget set. All metrics of every point: results.json, key `sequential`.", "",
             "| request | file |", "|---|---|",
             *[f"| {r.index} | {md_escape(str(r.path))} |" for r in requests], "",
             f"![metrics after each request]({png.name})", "",
             markdown_table([{"request": p["request"], "file": p["file"],
                              **{c: p[c] for c in cols}} for p in points],
                            ["request", "file", *cols], missing="-"), ""]
    atomic_write_text(out / "report.md", "\n".join(lines))
    return out / "report.md"


def finish(out: Path, res: dict, requests: list[Request], task: Task, method: str, cfg, tokenizer, *,
           base_model: str, preset: str, cost: CostRecord | None = None) -> list[str]:
    """The last request's model saved in ``out/model`` with its card, ``results.json`` (the curve under
    ``sequential``, ``metrics`` = the base model and the model after the last request, ``cost``: ``cost``'s
    record, as ``unlearn`` writes it), ``report.md``; the lines the command prints (empty on ranks other than
    0), the cost line before the outcome."""
    before, after = res["before"], res["rows"][-1]
    outcome = unlearn_outcome(before, after, method=method)
    save_trained(res["model"], out / "model", tokenizer)
    if not is_main_process():
        return []
    record = (cost if cost is not None else CostRecord()).as_dict()
    write_model_card(out / "model", base_model=base_model, task=task, method=method,
                     settings=to_dict(cfg.unlearn), metrics=after, outcome=outcome, cost=record)
    points = curve(before, requests, res["rows"])
    write_results(out, seed=cfg.seed, config=cfg, metrics={"base": before, method: after},
                  model_dir=str(out / "model"), base_model_dir=base_model, task=task, preset=preset,
                  unlearn_outcome=outcome, sequential={"requests": request_fingerprint(requests),
                                                       "attacks": list(CHEAP_ATTACKS), "curve": points,
                                                       "after_each": res["rows"]}, cost=record)
    report = write_report(out, method, task, requests, points)
    line = ", ".join(f"{k} " + " -> ".join(f"{p[k]:.3f}" for p in points) for k in CURVE_KEYS
                     if all(isinstance(p.get(k), float) for p in points))
    return [f"{method} on {task.name}, {len(requests)} requests in order: {line}",
            f"model: {out / 'model'}; report: {report}", cost_line(record), outcome["line"]]


def run_sequential(model, tokenizer, task: Task, requests: list[Request], cfg, out, *, fingerprint: dict,
                   preset: str, base_model: str, eval_kw: dict | None = None,
                   progress: bool = False) -> list[str]:
    """``obliviate unlearn --requests``: every check against the model before ``out`` is made, then
    :func:`run_requests` and :func:`finish`; the lines the command prints, with its cost (as ``unlearn``'s:
    :mod:`obliviate.runs.cost`)."""
    cost = CostRecord()  # each stage's passes, tokens and seconds; the run's wall seconds from here
    check_unlearn_run(model, tokenizer, task.forget, task.retain, cfg.unlearn, prompt=task.prompt)
    for r in requests:
        check_unlearn_run(model, tokenizer, r.data, task.retain, cfg.unlearn, prompt=task.prompt)
    out = prepare_out_dir(out)
    fp = {"command": "unlearn --requests", "config": to_dict(cfg), "task": task.summary(), **fingerprint}
    res = run_requests(model, tokenizer, task, requests, cfg.unlearn, out, fingerprint=fp, seed=cfg.seed,
                       eval_kw=eval_kw, progress=progress, cost=cost)
    return finish(out, res, requests, task, cfg.unlearn.method, cfg, tokenizer, base_model=base_model,
                  preset=preset,
                  cost=cost)
