"""Public evaluation benchmarks in one schema (:mod:`obliviate.tasks.sources.schema`).

Loaders read from :func:`obliviate.utils.data_dir` (``$OBLIVIATE_DATA``) or a ``root=``
argument; with ``allow_hub=True`` a missing file is fetched with ``datasets`` from the
Hugging Face hub where an equivalent exists. Malformed records raise
:class:`~obliviate.errors.DataError` naming the file and line (or record index).
"""

from obliviate.tasks.sources.ember import EMBER_SPLITS, EmberData, list_ember_concepts, load_ember
from obliviate.tasks.sources.generic import load_jsonl, load_records, parse_mapping
from obliviate.tasks.sources.mcq import WMDP_SUBSETS, list_mmlu_subjects, load_medmcqa, load_mmlu, load_wmdp
from obliviate.tasks.sources.registry import BENCHMARKS, benchmark_kind, benchmark_names, get_benchmark
from obliviate.tasks.sources.rtp import RTP_ATTRIBUTES, load_rtp
from obliviate.tasks.sources.schema import MCQExample, QAExample, TextExample
from obliviate.tasks.sources.tofu import TOFU_SPLITS, load_tofu, load_tofu_idk

__all__ = [
    "BENCHMARKS", "EMBER_SPLITS", "EmberData", "MCQExample", "QAExample", "RTP_ATTRIBUTES", "TOFU_SPLITS",
    "TextExample", "WMDP_SUBSETS", "benchmark_kind", "benchmark_names", "get_benchmark", "list_ember_concepts",
    "list_mmlu_subjects", "load_ember", "load_jsonl", "load_medmcqa", "load_mmlu", "load_records", "load_rtp",
    "load_tofu", "load_tofu_idk", "load_wmdp", "parse_mapping",
]
