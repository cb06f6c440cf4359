"""Public evaluation benchmarks in one schema (:mod:`obliviate.tasks.sources.schema`).

Loaders read from :func:`obliviate.utils.data_dir` (``$OBLIVIATE_DATA``) or a ``root=``
argument; with ``allow_hub=True`` a missing file is fetched with ``datasets`` from the
Hugging Face hub where an equivalent exists. Malformed records raise
:class:`~obliviate.errors.DataError` naming the file and line (or record index).

Here: generic files, MCQ sets (WMDP, MMLU, MedMCQA), RealToxicityPrompts and the WMDP corpora.
The loaders of a task's own data live in its task file (``load_tofu`` in :mod:`obliviate.tasks.tofu`,
``load_ember`` in :mod:`obliviate.tasks.ember`, the MUSE loaders in :mod:`obliviate.tasks.muse`), and
benchmarks by name in :mod:`obliviate.tasks.sources.benchmarks` (which imports them).
"""

from obliviate.tasks.sources.generic import load_jsonl, load_records, parse_mapping
from obliviate.tasks.sources.mcq import WMDP_SUBSETS, list_mmlu_subjects, load_medmcqa, load_mmlu, load_wmdp
from obliviate.tasks.sources.rtp import RTP_ATTRIBUTES, load_rtp
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample

__all__ = [
    "MCQExample", "QAExample", "RTP_ATTRIBUTES", "TextExample", "WMDP_SUBSETS", "list_mmlu_subjects", "load_jsonl",
    "load_medmcqa", "load_mmlu", "load_records", "load_rtp", "load_wmdp", "parse_mapping",
]
