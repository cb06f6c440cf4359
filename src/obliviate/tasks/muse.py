"""``muse:news|books``: MUSE's six-way unlearning benchmark (Shi et al. 2024, arXiv:2407.06460).

Data: :mod:`obliviate.tasks.sources.muse` (``<data>/muse/<corpus>/`` in MUSE's layout, or the
``muse-bench`` hub datasets with ``allow_hub=True``).

- forget = Data(docs=``raw/forget`` documents); retain = Data(docs=``raw/retain1``, or
  ``raw/retain2`` where retain1 is absent locally); holdout = Data(docs=``raw/holdout``),
  never trained on: the non-member side of MUSE's privacy-leakage (membership inference) test.
- ``knowmem_forget`` / ``knowmem_retain``: knowledge-memorisation QA on the forget / retain
  documents (roles forget / retain).
- ``verbmem_forget``: verbatim memorisation, role forget, kind text; each item is the true
  continuation ``gt`` as a :class:`~obliviate.tasks.sources.TextExample` with its ``prompt`` in
  ``meta["prompt"]`` (score the continuation's loss after the prompt); the raw
  ``{prompt, gt}`` pairs are also in ``meta["verbmem"]`` (for ROUGE of generated continuations).
- relearn = None.
"""

from __future__ import annotations

from obliviate.tasks.sources.muse import (
    MUSE_CORPORA, load_muse_knowmem, load_muse_raw, load_muse_verbmem, muse_dir,
)
from obliviate.tasks.sources.schema import TextExample
from obliviate.errors import ConfigError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task


def _retain_split(corpus: str, root) -> str:
    raw = muse_dir(corpus, root) / "raw"
    if not (raw / "retain1.txt").is_file() and (raw / "retain2.txt").is_file():
        return "retain2"
    return "retain1"  # local, else the hub's retain1, else the missing-file error names retain1.txt


@register_task("muse", help="MUSE news articles / Harry Potter books: muse:news|books",
               arguments=lambda: list(MUSE_CORPORA), needs_argument=True)
def muse_task(arg: str | None, *, root=None, limit: int | None = None, seed: int = 0, allow_hub: bool = False,
              **_) -> Task:
    """The MUSE task of corpus ``arg`` (news or books; see the module docstring)."""
    corpus = (arg or "").strip().lower()
    if corpus not in MUSE_CORPORA:
        raise ConfigError(f"task 'muse:{arg}': unknown MUSE corpus {arg!r}; valid: {', '.join(MUSE_CORPORA)}")
    retain_split = _retain_split(corpus, root)
    forget = cut(load_muse_raw(corpus, "forget", root=root, allow_hub=allow_hub), limit)
    retain = cut(load_muse_raw(corpus, retain_split, root=root, allow_hub=allow_hub), limit)
    holdout = cut(load_muse_raw(corpus, "holdout", root=root, allow_hub=allow_hub), limit)
    verbmem = cut(load_muse_verbmem(corpus, root=root, allow_hub=allow_hub), limit)
    evals = [
        EvalSet("knowmem_forget", "forget", "qa",
                cut(load_muse_knowmem(corpus, "forget_qa", root=root, allow_hub=allow_hub), limit)),
        EvalSet("knowmem_retain", "retain", "qa",
                cut(load_muse_knowmem(corpus, "retain_qa", root=root, allow_hub=allow_hub), limit)),
        EvalSet("verbmem_forget", "forget", "text",
                [TextExample(v["gt"], f"muse_{corpus}_verbmem", {"prompt": v["prompt"]}) for v in verbmem]),
    ]
    return Task(
        name=f"muse:{corpus}",
        forget=Data(docs=forget),
        retain=Data(docs=retain),
        evals=evals,
        relearn=None,
        holdout=Data(docs=holdout),
        prompt=PromptFormat(),
        meta={"corpus": corpus, "retain_split": retain_split, "verbmem": verbmem},
    )
