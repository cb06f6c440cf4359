"""Benchmarks by name: ``get_benchmark("wmdp_bio")``, ``get_benchmark("mmlu:anatomy")``.

Each entry of :data:`BENCHMARKS` is ``name -> (kind, loader)`` where ``kind`` is
``"qa"``, ``"mcq"`` or ``"text"`` and ``loader(**kw)`` returns the examples
(``kw``: ``root=``, ``allow_hub=``). ``mmlu:<subject>`` names are resolved on demand.
"""

from __future__ import annotations

from functools import partial

from obliviate.errors import DataError
from obliviate.registry import Registry
from obliviate.tasks.sources.mcq import WMDP_SUBSETS, load_medmcqa, load_mmlu, load_wmdp
from obliviate.tasks.sources.rtp import RTP_ATTRIBUTES, load_rtp
from obliviate.tasks.tofu import TOFU_SPLITS, load_tofu

BENCHMARKS = Registry("benchmark", error=DataError)
"""``name -> (kind, loader)``."""

for _s in TOFU_SPLITS:
    BENCHMARKS.add(f"tofu_{_s}", ("qa", partial(load_tofu, _s)))
for _s in WMDP_SUBSETS:
    BENCHMARKS.add(f"wmdp_{_s}", ("mcq", partial(load_wmdp, _s)))
BENCHMARKS.add("mmlu", ("mcq", partial(load_mmlu, None)))
BENCHMARKS.add("medmcqa", ("mcq", partial(load_medmcqa, "test")))
BENCHMARKS.add("medmcqa_sampled_50", ("mcq", partial(load_medmcqa, "sampled_50")))
BENCHMARKS.add("rtp", ("text", partial(load_rtp, None)))
for _s in RTP_ATTRIBUTES:
    BENCHMARKS.add(f"rtp_{_s}", ("text", partial(load_rtp, _s)))
del _s


def benchmark_names() -> list[str]:
    """Registered names plus the ``mmlu:<subject>`` pattern."""
    return list(BENCHMARKS) + ["mmlu:<subject>"]


def benchmark_kind(name: str) -> str:
    """``"qa"``, ``"mcq"`` or ``"text"`` for a registered (or ``mmlu:<subject>``) name."""
    if name.startswith("mmlu:"):
        return "mcq"
    return _entry(name)[0]


def get_benchmark(name: str, **kw) -> list:
    """Load the benchmark called ``name``; ``kw`` goes to its loader (``root=``, ``allow_hub=``, ``split=``
    for MMLU)."""
    if name.startswith("mmlu:"):
        subject = name.split(":", 1)[1]
        if not subject:
            raise DataError("benchmark 'mmlu:' needs a subject, e.g. 'mmlu:anatomy'")
        return load_mmlu(subject, **kw)
    return _entry(name)[1](**kw)


def _entry(name: str) -> tuple:
    if name not in BENCHMARKS:
        raise BENCHMARKS.unknown(name, benchmark_names())
    return BENCHMARKS[name]
