"""``muse:news|books``: MUSE's six-way unlearning benchmark (Shi et al. 2024, arXiv:2407.06460).

Forget / retain / holdout documents, knowmem QA and verbmem continuations from MUSE's own layout or the hub;
``meta["mia"]``: PrivLeak's Min-40% setting; ``meta["muse"]`` (:func:`muse_parts`): what the six-way
evaluation (:mod:`obliviate.eval.six_way`) reads, a missing part a line of ``meta["muse"]["missing"]``. Sets
and file layout: docs/benchmarks.md#the-tasks-data-files; the six criteria: docs/evaluation.md.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from obliviate.errors import ConfigError, DataError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task
from obliviate.tasks.sources import _io
from obliviate.tasks.sources._hub import hub_records, optional_hub_records
from obliviate.tasks.sources.schema import QAExample, TextExample
from obliviate.utils import note_input

MUSE_CORPORA = ("news", "books")
MUSE_HUB_IDS = {"news": "muse-bench/MUSE-News", "books": "muse-bench/MUSE-Books"}
MUSE_RAW_SPLITS = ("forget", "retain1", "retain2", "holdout")
MUSE_KNOWMEM_SPLITS = ("forget_qa", "retain_qa")
MUSE_LAYOUT = ("raw/forget.txt, raw/retain1.txt (or raw/retain2.txt), raw/holdout.txt, "
               "knowmem/forget_qa.json, knowmem/retain_qa.json, verbmem/forget.json")
"""The files a MUSE corpus directory holds, as named in errors."""


def split_documents(text: str) -> list[str]:
    """Blank-line-separated documents of ``text``, stripped, empty ones dropped."""
    return [d.strip() for d in re.split(r"\n[ \t\r\f\v]*\n", text) if d.strip()]


def muse_dir(corpus: str, root: str | os.PathLike | None = None) -> Path:
    if corpus not in MUSE_CORPORA:
        raise DataError(f"unknown MUSE corpus {corpus!r} (valid: {', '.join(MUSE_CORPORA)})")
    return _io.root_dir(root) / "muse" / corpus


def _missing(corpus: str, path: Path) -> _io.MissingFile:
    """A MUSE file that is not there (locally, nor on the hub where allowed): ``path`` names it."""
    return _io.MissingFile(f"MUSE {corpus}: file not found: {path}; expected {path.parents[1]}/ to hold "
                           f"{MUSE_LAYOUT} (MUSE's data/{corpus}/ layout; "
                           f"{_io.data_hint(MUSE_HUB_IDS[corpus])})", path)


def load_muse_raw(corpus: str, split: str, root: str | os.PathLike | None = None,
                  allow_hub: bool = False) -> list[str]:
    """The documents of ``raw/<split>.txt`` (``split`` one of :data:`MUSE_RAW_SPLITS`)."""
    if split not in MUSE_RAW_SPLITS:
        raise DataError(f"unknown MUSE raw split {split!r} (valid: {', '.join(MUSE_RAW_SPLITS)})")
    d = muse_dir(corpus, root)
    path = d / "raw" / f"{split}.txt"
    if path.is_file():
        note_input(path)  # recorded with its SHA-256 for the run's results and cards
        docs = split_documents(path.read_text(encoding="utf-8"))
    elif allow_hub:
        docs = [doc for where, rec in hub_records(MUSE_HUB_IDS[corpus], "raw", split, str(path))
                for doc in split_documents(_io.req_str(rec, "text", where))]
    else:
        raise _missing(corpus, path)
    if not docs:
        raise DataError(f"{path}: no documents")
    return docs


def load_muse_knowmem(corpus: str, split: str, root: str | os.PathLike | None = None,
                      allow_hub: bool = False) -> list[QAExample]:
    """The QA pairs of ``knowmem/<split>.json`` (``forget_qa`` or ``retain_qa``)."""
    if split not in MUSE_KNOWMEM_SPLITS:
        raise DataError(f"unknown MUSE knowmem split {split!r} (valid: {', '.join(MUSE_KNOWMEM_SPLITS)})")
    d = muse_dir(corpus, root)
    path = d / "knowmem" / f"{split}.json"
    if path.is_file():
        records = _io.json_list_records(path, _io.root_dir(root))
    elif allow_hub:
        records = hub_records(MUSE_HUB_IDS[corpus], "knowmem", split, str(path))
    else:
        raise _missing(corpus, path)
    out = [QAExample(question=_io.req_str(rec, "question", where), answer=_io.req_str(rec, "answer", where),
                     split=f"muse_{corpus}_{split}") for where, rec in records]
    if not out:
        raise DataError(f"{path}: no questions")
    return out


def load_muse_verbmem(corpus: str, root: str | os.PathLike | None = None,
                      allow_hub: bool = False) -> list[dict[str, str]]:
    """The ``{prompt, gt}`` pairs of ``verbmem/forget.json``."""
    d = muse_dir(corpus, root)
    path = d / "verbmem" / "forget.json"
    if path.is_file():
        records = _io.json_list_records(path, _io.root_dir(root))
    elif allow_hub:
        records = hub_records(MUSE_HUB_IDS[corpus], "verbmem", "forget", str(path))
    else:
        raise _missing(corpus, path)
    out = [{"prompt": _io.req_str(rec, "prompt", where), "gt": _io.req_str(rec, "gt", where)}
           for where, rec in records]
    if not out:
        raise DataError(f"{path}: no records")
    return out


def load_muse_icl(corpus: str, split: str, root: str | os.PathLike | None = None,
                  allow_hub: bool = False) -> list[QAExample] | None:
    """MUSE's in-context examples ``knowmem/<split>_icl.json`` (``forget_qa`` or ``retain_qa``), or None where
    the corpus has no such file (and no hub copy with ``allow_hub``)."""
    if split not in MUSE_KNOWMEM_SPLITS:
        raise DataError(f"unknown MUSE knowmem split {split!r} (valid: {', '.join(MUSE_KNOWMEM_SPLITS)})")
    path = muse_dir(corpus, root) / "knowmem" / f"{split}_icl.json"
    if path.is_file():
        records = _io.json_list_records(path, _io.root_dir(root))
    elif allow_hub:
        records = optional_hub_records(MUSE_HUB_IDS[corpus], "knowmem", f"{split}_icl", path)
    else:
        records = None
    if records is None:
        return None
    out = [QAExample(question=_io.req_str(rec, "question", where), answer=_io.req_str(rec, "answer", where),
                     split=f"muse_{corpus}_{split}_icl") for where, rec in records]
    if not out:
        raise DataError(f"{path}: no in-context examples")
    return out


MUSE_FOLD_SETS = ("scal", "sust")
MUSE_MAX_FOLDS = 4
"""MUSE ships four folds in ``scal/`` and in ``sust/`` (``forget_1`` .. ``forget_4``); fold 1 is the forget
set."""


def load_muse_folds(corpus: str, kind: str, root: str | os.PathLike | None = None,
                    allow_hub: bool = False) -> tuple[list[tuple[int, list[str]]], Path]:
    """The forget folds ``<kind>/forget_<k>.txt`` (``kind`` ``scal``: growing forget sets, each unlearned from
    the target; ``sust``: sequential requests), k = 1, 2, ... while the files exist, as ``[(k, documents)]``,
    and the first path not found. Fold 1 is MUSE's forget set: ``raw/forget.txt`` where ``forget_1.txt`` is
    absent (as muse_bench's README says). Empty when no fold beyond the first exists (nothing to scale or
    sequence)."""
    if kind not in MUSE_FOLD_SETS:
        raise DataError(f"unknown MUSE fold set {kind!r} (valid: {', '.join(MUSE_FOLD_SETS)})")
    d = muse_dir(corpus, root) / kind
    folds: list[tuple[int, list[str]]] = []
    k = 1
    while True:
        path = d / f"forget_{k}.txt"
        if path.is_file():
            note_input(path)  # recorded with its SHA-256 for the run's results and cards
            docs = split_documents(path.read_text(encoding="utf-8"))
            if not docs:
                raise DataError(f"{path}: no documents")
        elif k == 1:
            docs = load_muse_raw(corpus, "forget", root=root, allow_hub=allow_hub)
        # (MUSE-Books has no scal / sust folds: MUSE ran both on News only)
        elif allow_hub and k <= MUSE_MAX_FOLDS:
            records = optional_hub_records(MUSE_HUB_IDS[corpus], kind, f"forget_{k}", path)
            if records is None:
                break
            docs = [doc for where, rec in records for doc in split_documents(_io.req_str(rec, "text", where))]
        else:
            break
        folds.append((k, docs))
        k += 1
    return (folds if len(folds) > 1 else []), path


def _looked_for(what: str, path: Path) -> str:
    return f"{what}: not computed, file not found: {path}"


def muse_parts(corpus: str, root=None, allow_hub: bool = False, limit: int | None = None) -> dict:
    """What MUSE's six-way evaluation reads (module docstring), ``limit`` items of each evaluation file, and
    ``missing``: one line per part the corpus lacks, naming the file it looked for."""
    d = muse_dir(corpus, root)
    parts: dict = {"corpus": corpus, "missing": []}
    for split, name in (("forget_qa", "knowmem_forget"), ("retain_qa", "knowmem_retain")):
        icl = load_muse_icl(corpus, split, root=root, allow_hub=allow_hub)
        parts[f"{name}_icl"] = None if icl is None else [{"question": x.question,
                                                          "answer": x.answer} for x in icl]
        if icl is None:
            label = "KnowMem on D_f" if split == "forget_qa" else "KnowMem on D_r (utility preservation)"
            path = d / "knowmem" / f"{split}_icl.json"
            parts["missing"].append(_looked_for(f"{label}, MUSE's few-shot prompt", path))
    for kind, label in (("scal", "scalability"), ("sust", "sustainability")):
        folds, path = load_muse_folds(corpus, kind, root=root, allow_hub=allow_hub)
        parts[kind] = [{"fold": k, "docs": cut(docs, limit)} for k, docs in folds]
        if not folds:
            parts["missing"].append(_looked_for(f"{label} ({kind}/: a second fold)", path))
    return parts


MUSE_MIA_K = 0.4
"""MUSE's PrivLeak uses Min-40% (muse_bench: ``forget_holdout_Min-40%``)."""


def load_muse_privleak(corpus: str, split: str, root: str | os.PathLike | None = None,
                       allow_hub: bool = False) -> list[str] | None:
    """MUSE's membership-inference samples ``privleak/<split>.json`` (``forget`` or ``holdout``: a JSON list
    of texts, or of records with ``text``), or None where the corpus has none (the hub's ``privleak`` subset
    with ``allow_hub``)."""
    if split not in ("forget", "holdout"):
        raise DataError(f"unknown MUSE privleak split {split!r} (valid: forget, holdout)")
    base = _io.root_dir(root)
    path = muse_dir(corpus, root) / "privleak" / f"{split}.json"
    if path.is_file():
        name = _io.display(path, base)
        data = _io.read_json(path, name)
        if not isinstance(data, list):
            raise DataError(f"{name}: expected a JSON list of texts, got {type(data).__name__}")
        records = [(f"{name} record "
                    f"{i}", x if isinstance(x, dict) else {"text": x}) for i, x in enumerate(data, 1)]
    elif allow_hub:
        records = optional_hub_records(MUSE_HUB_IDS[corpus], "privleak", split, path)
    else:
        records = None
    if records is None:
        return None
    out = [_io.req_str(rec, "text", where) for where, rec in records]
    if not out:
        raise DataError(f"{path}: no samples")
    return out


# ------------------------------------------------------------------ the task

def _retain_split(corpus: str, root) -> str:
    raw = muse_dir(corpus, root) / "raw"
    if not (raw / "retain1.txt").is_file() and (raw / "retain2.txt").is_file():
        return "retain2"
    return "retain1"  # local, else the hub's retain1, else the missing-file line names retain1.txt


NOT_COMPUTED = {
    "retain": "no retain documents: an unlearning run's retain term and "
              "compare's retain training need them (evaluation does not)",
    "holdout": "no holdout documents: the PrivLeak fallback without privleak/ samples and the holdout MIA",
    "verbmem": "VerbMem (verbmem_forget_loss, muse_verbmem_f): not computed",
    "forget_qa": "KnowMem on D_f (knowmem_forget, muse_knowmem_f): not computed",
    "retain_qa": "KnowMem on D_r (knowmem_retain, muse_knowmem_r): not computed",
}
"""What each optional MUSE file's absence leaves out (the line in ``meta["muse"]["missing"]`` names the file
too)."""


def _optional(load, key: str, missing: list[str], *also: Path):
    """``load()``, or None with a line in ``missing`` naming the file looked for (and ``also``, the others
    that would have done) and what is not computed."""
    try:
        return load()
    except _io.MissingFile as e:  # not on disk, nor (where allowed) on the hub: the same line either way
        missing.append(f"{NOT_COMPUTED[key]}; {e.looked_for(*also)}")
        return None


@register_task("muse", help="MUSE news articles / Harry Potter books: muse:news|books",
               arguments=lambda: list(MUSE_CORPORA), needs_argument=True)
def muse_task(arg: str | None, *, root=None, limit: int | None = None, seed: int = 0, allow_hub: bool = False,
              **_) -> Task:
    """The MUSE task of corpus ``arg`` (news or books; see the module docstring).

    Only ``raw/forget.txt`` (the forget set) is required; every other part is computed where its file is
    there, and each missing file is one line of ``meta["muse"]["missing"]`` (also ``meta["missing"]``, which
    ``eval`` and the task summary show), all of them at once. Without ``raw/forget.txt`` the error lists every
    missing file."""
    corpus = (arg or "").strip().lower()
    if corpus not in MUSE_CORPORA:
        raise ConfigError(f"task 'muse:{arg}': unknown MUSE corpus {arg!r}; valid: {', '.join(MUSE_CORPORA)}")
    hub = {"root": root, "allow_hub": allow_hub}
    missing: list[str] = []
    retain_split = _retain_split(corpus, root)
    retain = _optional(lambda: load_muse_raw(corpus, retain_split, **hub), "retain", missing,
                       *([muse_dir(corpus,
                                   root) / "raw" / "retain2.txt"] if retain_split == "retain1" else []))
    holdout = _optional(lambda: load_muse_raw(corpus, "holdout", **hub), "holdout", missing)
    verbmem = _optional(lambda: load_muse_verbmem(corpus, **hub), "verbmem", missing) or []
    knowmem = {s: _optional(lambda s=s: load_muse_knowmem(corpus, s, **hub), s, missing) or []
               for s in MUSE_KNOWMEM_SPLITS}
    try:
        forget = cut(load_muse_raw(corpus, "forget", **hub), limit)
    except _io.MissingFile as e:
        others = "".join(f"; also missing: {x}" for x in missing)
        raise DataError(f"{e}{others}") from None
    retain, holdout, verbmem = cut(retain or [], limit), cut(holdout or [], limit), cut(verbmem, limit)
    knowmem = {s: cut(v, limit) for s, v in knowmem.items()}
    p_forget, p_holdout = (load_muse_privleak(corpus, s, **hub) for s in ("forget", "holdout"))
    samples = p_forget is not None and p_holdout is not None
    mia = None
    if samples or holdout:
        mia = {"members": cut(p_forget if samples else forget, limit),
               "nonmembers": cut(p_holdout if samples else holdout, limit),
               "k": MUSE_MIA_K, "add_eos": False, "source": "privleak" if samples else "raw"}
    muse = muse_parts(corpus, root=root, allow_hub=allow_hub, limit=limit)
    muse["missing"][:0] = missing  # the task's own files first, then the six-way's extra parts
    for split, name in (("forget_qa", "knowmem_forget"), ("retain_qa", "knowmem_retain")):
        muse[name] = [{"question": x.question, "answer": x.answer} for x in knowmem[split]]
    muse["verbmem"] = verbmem
    privleak = muse_dir(corpus, root) / "privleak"
    if not samples and mia is not None:
        muse["missing"].append(f"PrivLeak: MUSE's samples not found ({privleak}/forget.json and "
                               "holdout.json): computed on the raw forget and holdout documents")
    elif mia is None:
        muse["missing"].append(f"PrivLeak (muse_mia_auc, muse_privleak): not computed; files not found: "
                               f"{privleak}/forget.json and holdout.json, and no raw holdout documents")
    evals = [EvalSet(name, role, "qa", knowmem[split]) for split, name, role in
             (("forget_qa", "knowmem_forget", "forget"),
              ("retain_qa", "knowmem_retain", "retain")) if knowmem[split]]
    if verbmem:
        evals.append(EvalSet("verbmem_forget", "forget", "text",
                             [TextExample(v["gt"], f"muse_{corpus}_verbmem", {"prompt": v["prompt"]})
                              for v in verbmem]))
    return Task(
        name=f"muse:{corpus}",
        forget=Data(docs=forget),
        retain=Data(docs=retain),
        evals=evals,
        relearn=None,
        holdout=Data(docs=holdout) if holdout else None,
        prompt=PromptFormat(),
        meta={"corpus": corpus, "retain_split": retain_split if retain else None, "verbmem": verbmem,
              "mia": mia,
              "muse": muse, "missing": muse["missing"]},
    )
