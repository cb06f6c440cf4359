"""``rwku:<target>``: RWKU, real-world knowledge unlearning of one of 200 famous people (Jin et al. 2024,
arXiv:2406.10890; dataset ``jinzhuoran/RWKU``, processing in the jinzhuoran/RWKU repository's
``process/data_process.py``). With ``allow_hub`` a missing file is read from the hub's config of the same data
(:data:`HUB_CONFIGS`) and filtered to the target's rows.

The files it reads: docs/benchmarks.md, "rwku"; the roles of its sets: docs/tasks.md.
"""

from __future__ import annotations

import re
from pathlib import Path

from obliviate.errors import ConfigError, DataError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task
from obliviate.tasks.sources import _io
from obliviate.tasks.sources._hub import hub_records
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample

RWKU_HUB_ID = "jinzhuoran/RWKU"
HUB_CONFIGS = {"intro": ("forget_target", "train"), "forget_level1": ("forget_level1", "test"),
               "forget_level2": ("forget_level2", "test"), "forget_level3": ("forget_level3", "test"),
               "neighbor_level1": ("neighbor_level1", "test"), "neighbor_level2": ("neighbor_level2", "test"),
               "forget_mia": ("mia_forget", "test"), "retain_mia": ("mia_retain", "test"),
               "retain_mmlu": ("utility_general", "test"), "triviaqa": ("utility_factuality", "test"),
               "passage": ("train_original_passage", "train")}
"""Local file (without ``.json``) -> the hub's (config, split) of the same rows, as ``data_process.py`` maps
them."""

FILL_IN = "Please complete the blank in the following question.\nQuestion: {}"
ANSWER_BRIEFLY = "Please briefly answer the following question.\nQuestion: {}"
"""RWKU's instructions (eval_forget.py): fill-in-the-blank probes, and QA / adversarial / neighbour probes."""


def slug(name: str) -> str:
    """``"Prince Harry, Duke of Sussex"``, ``prince_harry_duke_of_sussex`` ->
    ``prince_harry_duke_of_sussex``."""
    return "_".join(re.findall(r"[^\W_]+", name.lower()))


def _target_dirs(root) -> dict[str, Path]:
    base = _io.root_dir(root) / "rwku" / "Target"
    out = {}
    if base.is_dir():
        for d in sorted(base.iterdir()):
            num, _, name = d.name.partition("_")
            if d.is_dir() and num.isdigit() and name:
                out[slug(name)] = d
                out[num] = d
    return out


def _hub_targets() -> list[str]:
    return [_io.req_str(rec, "target", where) for where,
            rec in hub_records(RWKU_HUB_ID, "forget_target", "train", "rwku/Target/")]


def resolve_target(arg: str, root=None, allow_hub: bool = False) -> tuple[str, Path]:
    """``(target name, local directory)`` of ``rwku:<arg>`` (a name in any case, spaces or underscores, or
    RWKU's number); the directory may not exist when the target comes from the hub's ``forget_target``
    list."""
    key = slug(arg) if not arg.strip().isdigit() else arg.strip()
    dirs = _target_dirs(root)
    if key in dirs:
        d = dirs[key]
        intro = d / "intro.json"
        name = d.name.partition("_")[2].replace("_", " ")
        if intro.is_file():
            recs = _io.json_list_records(intro, _io.root_dir(root))
            name = _io.req_str(recs[0][1], "target", recs[0][0]) if recs else name
        return name, d
    if allow_hub:
        names = _hub_targets()
        for i, name in enumerate(names, 1):
            if key in (slug(name), str(i)):
                return name, _io.root_dir(root) / "rwku" / "Target" / f"{i}_{name.replace(' ', '_')}"
        raise ConfigError(f"task 'rwku:{arg}': no RWKU target {arg!r} in {RWKU_HUB_ID}'s forget_target "
                          f"({len(names)} targets, e.g. {', '.join(names[:3])})")
    known = sorted(d.name for d in set(dirs.values()))
    raise DataError(f"task 'rwku:{arg}': no directory for target {arg!r} under "
                    f"{_io.root_dir(root) / 'rwku' / 'Target'}"
                    f" ({'targets there: ' + ', '.join(known[:5]) if known else 'none there'}; "
                    f"RWKU's layout, process/data_process.py; {_io.data_hint(RWKU_HUB_ID)})")


def load_rwku(part: str, target: str, directory: Path, root=None,
              allow_hub: bool = False) -> list[tuple[str, dict]]:
    """The records of ``<directory>/<part>.json`` (``part`` a key of :data:`HUB_CONFIGS`), else the target's
    rows of the hub's config with ``allow_hub``; empty where neither has any."""
    path = directory / f"{part}.json"
    if path.is_file():
        return _io.json_list_records(path, _io.root_dir(root))
    if not allow_hub:
        raise _io.MissingFile(f"RWKU {target}: file not found: {path} (RWKU's Target/<n>_<Name>/ layout; "
                              f"{_io.data_hint(RWKU_HUB_ID)})", path)
    config, split = HUB_CONFIGS[part]
    key = "target" if part == "intro" else "subject"
    return [(w, r) for w, r in hub_records(RWKU_HUB_ID, config, split, str(path)) if r.get(key) == target]


def _probes(records, name: str, instruction: str) -> list[QAExample]:
    out = []
    for where, rec in records:
        query = _io.req_str(rec, "query", where)
        meta = {"query": query, "level": rec.get("level"), "entity": _io.req_str(rec, "subject", where)}
        if rec.get("type") is not None:
            meta["type"] = _io.as_str(rec["type"], "type", where)
        out.append(QAExample(question=instruction.format(query), answer=_io.req_str(rec, "answer", where),
                             split=name, meta=meta))
    return out


def _texts(records, name: str) -> list[str]:
    return [t for t in (_io.req_str(rec, "text", where) for where, rec in records) if t.strip()]


def _mcq(records) -> list[MCQExample]:
    out = []
    for where, rec in records:
        choices = _io.req_str_list(rec, "choices", where, min_len=2)
        out.append(MCQExample(question=_io.req_str(rec, "question", where), choices=choices,
                              answer_index=_io.as_index(_io.get(rec, "answer", where), len(choices), "answer",
                                                        where),
                              split="utility_general", subject=rec.get("task")))
    return out


def _trivia(records) -> list[QAExample]:
    out = []
    for where, rec in records:
        answers = _io.req_str_list(rec, "answers", where)
        out.append(QAExample(question=_io.req_str(rec, "question", where), answer=answers[0],
                             split="utility_factuality", meta={"answers": answers}))
    return out


@register_task("rwku", help="RWKU real-world knowledge unlearning of one famous person: rwku:<target> "
                            "(name or RWKU's number, e.g. rwku:stephen_king, rwku:1)", needs_argument=True)
def rwku_task(arg: str | None, *, root=None, limit: int | None = None, seed: int = 0, allow_hub: bool = False,
              **_) -> Task:
    """The RWKU task of target ``arg`` (see the module docstring)."""
    target, d = resolve_target(arg or "", root, allow_hub)
    missing: list[str] = []

    def load(part: str) -> list[tuple[str, dict]]:
        """The part's records; a missing file (other than the passages) is a line of ``missing``, not an
        error."""
        try:
            return load_rwku(part, target, d, root, allow_hub)
        except _io.MissingFile as e:  # not on disk, nor (where allowed) on the hub: the same line either way
            if part == "passage":
                raise
            missing.append(f"{part}: not evaluated, {e.looked_for()}")
            return []

    passages = cut(_texts(load("passage"), "passage"), limit)
    if not passages:
        raise DataError(f"RWKU {target}: no passages in {d / 'passage.json'}: nothing to unlearn")
    mia = {name: cut(_texts(load(name), name), limit) for name in ("forget_mia", "retain_mia")}
    probes = {name: cut(_probes(load(name), name, FILL_IN if name.endswith("level1") else ANSWER_BRIEFLY),
                        limit)
              for name in ("forget_level1", "forget_level2", "forget_level3", "neighbor_level1",
                           "neighbor_level2")}
    roles = {"forget_level1": "forget", "forget_level2": "forget", "forget_level3": "forget",
             "neighbor_level1": "neighbour", "neighbor_level2": "neighbour"}
    evals = [EvalSet(name, roles[name], "qa", items, variant=name == "forget_level3")
             for name, items in probes.items() if items]
    utility = {"utility_general": cut(_mcq(load("retain_mmlu")), limit),
               "utility_factuality": cut(_trivia(load("triviaqa")), limit)}
    evals += [EvalSet(name, "utility", "mcq" if name == "utility_general" else "qa", items)
              for name, items in utility.items() if items]
    evals += [EvalSet(name, "forget" if name == "forget_mia" else "retain", "text",
                      [TextExample(text=t, split=name) for t in texts]) for name,
                      texts in mia.items() if texts]
    return Task(
        name=f"rwku:{slug(target)}",
        forget=Data(docs=passages),
        retain=Data(docs=mia["retain_mia"]),
        evals=evals,
        prompt=PromptFormat(template="{question}\nAnswer:"),
        meta={"target": target, "directory": str(d), "missing": missing,
              "mia": {"forget": "forget_mia", "retain": "retain_mia"},
              "not_read": ["utility_reason", "utility_truthfulness", "utility_fluency"]},
    )
