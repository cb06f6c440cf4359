"""Public evaluation benchmarks in one schema (:mod:`obliviate.tasks.sources.schema`): generic files, MCQ sets
(WMDP, MMLU, MedMCQA), RealToxicityPrompts and the WMDP corpora, read from :func:`obliviate.utils.data_dir` or
``root=``, from the hub with ``allow_hub=True``; a malformed record is a :class:`~obliviate.errors.DataError`
naming the file and line. A task's own loaders live in its task file; benchmarks by name in
:mod:`obliviate.tasks.sources.benchmarks`. docs/benchmarks.md.
"""

from obliviate.tasks.sources.generic import load_jsonl, load_records, parse_mapping
from obliviate.tasks.sources.mcq import WMDP_SUBSETS, list_mmlu_subjects, load_medmcqa, load_mmlu, load_wmdp
from obliviate.tasks.sources.rtp import RTP_ATTRIBUTES, load_rtp
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample

__all__ = [
    "MCQExample", "QAExample", "RTP_ATTRIBUTES", "TextExample", "WMDP_SUBSETS", "list_mmlu_subjects",
    "load_jsonl",
    "load_medmcqa", "load_mmlu", "load_records", "load_rtp", "load_wmdp", "parse_mapping",
]
