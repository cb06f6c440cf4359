"""``wmdp:bio|cyber``: hazardous knowledge (Li et al. 2024, WMDP, arXiv:2403.03218).

WMDP's forget and retain corpora as documents (the bio forget corpus is gated and must be placed locally), the
WMDP questions (forget), MMLU's neighbouring subjects (neighbour) and the other subjects, at most
:data:`MMLU_PER_SUBJECT` each and interleaved so ``limit`` keeps a spread (utility). docs/benchmarks.md,
"wmdp".
"""

from __future__ import annotations

from obliviate.tasks.sources import _io
from obliviate.tasks.sources.mcq import list_mmlu_subjects, load_mmlu, load_wmdp
from obliviate.tasks.sources.schema import MCQExample
from obliviate.tasks.sources.wmdp_corpora import load_wmdp_corpus
from obliviate.errors import ConfigError
from obliviate.tasks import Data, EvalSet, PromptFormat, Task, cut, register_task

NEIGHBOUR_SUBJECTS = {"bio": ("college_biology", "virology"),
                      "cyber": ("college_computer_science", "computer_security")}
MMLU_PER_SUBJECT = 20
"""Utility questions per MMLU subject (57 subjects: about 1,100 questions)."""


def interleave(examples: list[MCQExample], per_subject: int | None = None) -> list[MCQExample]:
    """Round-robin over subjects (in first-seen order), at most ``per_subject`` of each."""
    groups: dict[str, list[MCQExample]] = {}
    for ex in examples:
        groups.setdefault(ex.subject or "", []).append(ex)
    if per_subject is not None:
        groups = {k: v[:per_subject] for k, v in groups.items()}
    depth = max((len(v) for v in groups.values()), default=0)
    return [g[i] for i in range(depth) for g in groups.values() if i < len(g)]


def _mmlu_sets(subset: str, root, allow_hub: bool) -> tuple[list[MCQExample], list[MCQExample]]:
    """(neighbour, utility) MMLU questions; utility leaves out the neighbour subjects."""
    neighbours = NEIGHBOUR_SUBJECTS[subset]
    neighbour = load_mmlu(list(neighbours), root=root, allow_hub=allow_hub)
    if (_io.root_dir(root) / "mmlu" / "test").is_dir():
        utility = load_mmlu([s for s in list_mmlu_subjects(root=root) if s not in neighbours], root=root)
    else:  # the hub's "all" config (or the loader's missing-directory error)
        utility = [ex for ex in load_mmlu(None, root=root,
                                          allow_hub=allow_hub) if ex.subject not in neighbours]
    return interleave(neighbour), interleave(utility, MMLU_PER_SUBJECT)


@register_task("wmdp", help="WMDP hazardous knowledge: wmdp:bio|cyber "
                            "(forget/retain corpora, WMDP + MMLU MCQs)",
               arguments=lambda: list(NEIGHBOUR_SUBJECTS), needs_argument=True)
def wmdp_task(arg: str | None, *, root=None, limit: int | None = None, seed: int = 0, allow_hub: bool = False,
              **_) -> Task:
    """The WMDP task of ``arg`` (bio or cyber; see the module docstring)."""
    subset = (arg or "").strip().lower()
    if subset not in NEIGHBOUR_SUBJECTS:
        raise ConfigError(f"task 'wmdp:{arg}': unknown WMDP subset {arg!r}; valid: "
                          f"{', '.join(NEIGHBOUR_SUBJECTS)}")
    forget = load_wmdp_corpus(subset, "forget", root=root, allow_hub=allow_hub, limit=limit)
    retain = load_wmdp_corpus(subset, "retain", root=root, allow_hub=allow_hub, limit=limit)
    neighbour, utility = _mmlu_sets(subset, root, allow_hub)
    evals = [EvalSet(f"wmdp_{subset}", "forget", "mcq",
                     cut(load_wmdp(subset, root=root, allow_hub=allow_hub), limit)),
             EvalSet("mmlu_neighbour", "neighbour", "mcq", cut(neighbour, limit)),
             EvalSet("mmlu", "utility", "mcq", cut(utility, limit))]
    return Task(
        name=f"wmdp:{subset}",
        forget=Data(docs=forget),
        retain=Data(docs=retain),
        evals=evals,
        relearn=None,
        holdout=None,
        prompt=PromptFormat(),
        meta={"subset": subset, "neighbour_subjects": list(NEIGHBOUR_SUBJECTS[subset]),
              "mmlu_per_subject": MMLU_PER_SUBJECT},
    )
