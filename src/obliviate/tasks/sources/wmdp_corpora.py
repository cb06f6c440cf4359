"""WMDP's unlearning corpora (Li et al. 2024, arXiv:2403.03218) -> lists of texts.

Local files: ``<data>/wmdp/{bio,cyber}-{forget,retain}-corpus.jsonl``, JSON Lines with a
``text`` field (the layout WMDP's RMU code reads from its ``data/`` folder).
Hub fallback: ``cais/wmdp-corpora``, configs ``bio-retain-corpus``, ``cyber-forget-corpus``
and ``cyber-retain-corpus`` (split ``train``, field ``text``). The bio forget corpus is gated:
it is not on the hub and must be requested from the WMDP authors, then saved locally.
"""

from __future__ import annotations

import os

from obliviate.tasks.sources import _io
from obliviate.tasks.sources._hub import hub_records
from obliviate.errors import DataError, setting

WMDP_CORPUS_SUBSETS = ("bio", "cyber")
WMDP_CORPUS_PARTS = ("forget", "retain")
WMDP_CORPORA_HUB_ID = "cais/wmdp-corpora"
HUB_CONFIGS = ("bio-retain-corpus", "cyber-forget-corpus", "cyber-retain-corpus")
BIO_FORGET_FORM = "the request form linked from https://huggingface.co/datasets/cais/wmdp-corpora"


def load_wmdp_corpus(subset: str, part: str, root: str | os.PathLike | None = None, allow_hub: bool = False,
                     limit: int | None = None) -> list[str]:
    """The texts of ``wmdp/<subset>-<part>-corpus.jsonl`` (the first ``limit`` with a limit)."""
    if subset not in WMDP_CORPUS_SUBSETS or part not in WMDP_CORPUS_PARTS:
        raise DataError(f"unknown WMDP corpus {subset}-{part} (subsets: {', '.join(WMDP_CORPUS_SUBSETS)}; "
                        f"parts: {', '.join(WMDP_CORPUS_PARTS)})")
    base = _io.root_dir(root)
    name = f"{subset}-{part}-corpus"
    path = base / "wmdp" / f"{name}.jsonl"
    if path.is_file():
        records = _io.iter_jsonl(path, _io.display(path, base))
    elif allow_hub and name in HUB_CONFIGS:
        records = hub_records(WMDP_CORPORA_HUB_ID, name, "train", str(path))
    elif name == "bio-forget-corpus":
        where = " / ".join(w for w in ("$OBLIVIATE_DATA", setting("root=...", None)) if w)
        raise _io.MissingFile(f"WMDP bio forget corpus: file not found: {path}; it is gated (not on the "
                              f"hub): request it from the WMDP authors via {BIO_FORGET_FORM}, then save it "
                              f"at that path as JSON Lines with a 'text' field (or point {where} at a "
                              "directory holding wmdp/bio-forget-corpus.jsonl)", path)
    else:
        raise _io.MissingFile(f"WMDP {subset} {part} corpus: file not found: {path} (JSON Lines with a "
                              f"'text' field; {_io.data_hint(f'{WMDP_CORPORA_HUB_ID}:{name}')})", path)
    out: list[str] = []
    for where, rec in records:
        if limit is not None and len(out) >= limit:
            break
        text = _io.req_str(rec, "text", where)
        if text.strip():
            out.append(text)
    if not out:
        raise DataError(f"{_io.display(path, base)}: no texts")
    return out
