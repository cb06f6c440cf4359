"""obliviate: remove targeted knowledge and capabilities from language models, and prove that they are gone.

The Python API (:mod:`obliviate.api`): ``load_task``, ``finetune``, ``unlearn``, ``evaluate``, ``attack``,
``compare``; ``from obliviate import unlearn`` works, and loads torch only when first used.
"""

__version__ = "0.1.0"

_API = ("attack", "compare", "evaluate", "finetune", "load_task", "unlearn")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        from obliviate import api

        return getattr(api, name)
    raise AttributeError(f"module 'obliviate' has no attribute {name!r}")
