"""Benchmarks by name: ``get_benchmark("wmdp_bio")``, ``get_benchmark("mmlu:anatomy")``.

Each entry of :data:`BENCHMARKS` is ``name -> (kind, loader)`` where ``kind`` is
``"qa"``, ``"mcq"`` or ``"text"`` and ``loader(**kw)`` returns the examples
(``kw``: ``root=``, ``allow_hub=``). ``mmlu:<subject>`` names are resolved on demand.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from obliviate.tasks.sources.mcq import WMDP_SUBSETS, load_medmcqa, load_mmlu, load_wmdp
from obliviate.tasks.sources.rtp import RTP_ATTRIBUTES, load_rtp
from obliviate.tasks.sources.tofu import TOFU_SPLITS, load_tofu
from obliviate.errors import DataError

BENCHMARKS: dict[str, tuple[str, Callable[..., list]]] = {}

for _s in TOFU_SPLITS:
    BENCHMARKS[f"tofu_{_s}"] = ("qa", partial(load_tofu, _s))
for _s in WMDP_SUBSETS:
    BENCHMARKS[f"wmdp_{_s}"] = ("mcq", partial(load_wmdp, _s))
BENCHMARKS["mmlu"] = ("mcq", partial(load_mmlu, None))
BENCHMARKS["medmcqa"] = ("mcq", partial(load_medmcqa, "test"))
BENCHMARKS["medmcqa_sampled_50"] = ("mcq", partial(load_medmcqa, "sampled_50"))
BENCHMARKS["rtp"] = ("text", partial(load_rtp, None))
for _s in RTP_ATTRIBUTES:
    BENCHMARKS[f"rtp_{_s}"] = ("text", partial(load_rtp, _s))
del _s


def benchmark_names() -> list[str]:
    """Registered names plus the ``mmlu:<subject>`` pattern."""
    return list(BENCHMARKS) + ["mmlu:<subject>"]


def benchmark_kind(name: str) -> str:
    """``"qa"``, ``"mcq"`` or ``"text"`` for a registered (or ``mmlu:<subject>``) name."""
    if name.startswith("mmlu:"):
        return "mcq"
    if name not in BENCHMARKS:
        raise _unknown(name)
    return BENCHMARKS[name][0]


def get_benchmark(name: str, **kw) -> list:
    """Load the benchmark called ``name``; ``kw`` goes to its loader (``root=``, ``allow_hub=``, ``split=`` for MMLU)."""
    if name.startswith("mmlu:"):
        subject = name.split(":", 1)[1]
        if not subject:
            raise DataError("benchmark 'mmlu:' needs a subject, e.g. 'mmlu:anatomy'")
        return load_mmlu(subject, **kw)
    if name not in BENCHMARKS:
        raise _unknown(name)
    return BENCHMARKS[name][1](**kw)


def _unknown(name: str) -> DataError:
    return DataError(f"unknown benchmark {name!r} (known: {', '.join(benchmark_names())})")
