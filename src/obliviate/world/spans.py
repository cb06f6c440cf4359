"""Character spans that tile a string: ``[[start, end, label], ...]``, contiguous, in order.

Convention: whitespace belongs to the span that follows it, so that a BPE token such as
``" zalpradine"`` (leading space) falls inside one span.
"""

from __future__ import annotations

from string import Formatter


def fill(template: str, values: dict[str, str], specific: set[str]) -> tuple[str, list[list]]:
    """Fill ``template`` and label each character "specific" (a field in ``specific``) or "structural".

    >>> fill("{e} is treated with {v}.", {"e": "Morvexia", "v": "zalpradine"}, {"e", "v"})[1]
    [[0, 8, 'specific'], [8, 24, 'structural'], [24, 35, 'specific'], [35, 36, 'structural']]
    """
    pieces: list[list] = []  # [text, kind]
    for literal, field, _spec, _conv in Formatter().parse(template):
        if literal:
            pieces.append([literal, "structural"])
        if field is not None:
            pieces.append([values[field], "specific" if field in specific else "structural"])
    # Move trailing whitespace of each piece to the start of the next one.
    for i in range(len(pieces) - 1):
        text = pieces[i][0]
        stripped = text.rstrip()
        if stripped != text:
            pieces[i][0] = stripped
            pieces[i + 1][0] = text[len(stripped):] + pieces[i + 1][0]
    merged: list[list] = []
    for text, kind in pieces:
        if not text:
            continue
        if merged and merged[-1][1] == kind:
            merged[-1][0] += text
        else:
            merged.append([text, kind])
    spans, pos = [], 0
    for text, kind in merged:
        spans.append([pos, pos + len(text), kind])
        pos += len(text)
    return "".join(t for t, _ in merged), spans


def tiles(text: str, spans: list) -> bool:
    """True when ``spans`` cover ``text`` exactly: start at 0, contiguous, non-empty, end at len(text)."""
    pos = 0
    for span in spans:
        start, end = span[0], span[1]
        if start != pos or end <= start:
            return False
        pos = end
    return pos == len(text)
