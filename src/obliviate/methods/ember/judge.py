"""EMBER step 2b: does a candidate feature belong to the concept? (the judge)

The paper shows the top-20 tokens of each high-mass-ratio feature to a hosted LLM, which
writes a one-sentence description and answers JSON ``{is_member, confidence}``; a feature
is kept when ``is_member`` and ``confidence >= 0.85`` (docs/methods.md). Here a judge is
anything with a ``judge(feature_id, top_tokens, description) -> Judgement`` method: the offline
:class:`LexiconJudge` (the default, no network) or the LLM judge on an OpenAI-compatible endpoint,
:class:`obliviate.integrations.llm_judge.HTTPJudge`. A judge never raises for a bad reply: it returns
``Judgement(is_member=None, ...)`` ("no judgement"), which is never kept.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

from obliviate.errors import ConfigError, DataError

MIN_CONFIDENCE = 0.85
"""A feature is kept when its judgement says member with at least this confidence."""

N_TOP_TOKENS = 20


@dataclass(frozen=True)
class Judgement:
    """A judge's answer for one feature. ``is_member=None`` means "no judgement"."""

    is_member: bool | None
    confidence: float
    reason: str
    description: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def kept(self, min_confidence: float = MIN_CONFIDENCE) -> bool:
        """True iff the judgement says member with ``confidence >= min_confidence``."""
        return self.is_member is True and self.confidence >= min_confidence


def keep(judgement: Judgement, min_confidence: float = MIN_CONFIDENCE) -> bool:
    """True iff the judgement says member with ``confidence >= min_confidence`` (:meth:`Judgement.kept`)."""
    return judgement.kept(min_confidence)


@runtime_checkable
class Judge(Protocol):
    """Anything that can judge whether a feature's top tokens belong to the concept."""

    def judge(self, feature_id: int, top_tokens: list[str], description: str | None = None) -> Judgement: ...


def judge_features(
    judge: Judge, feature_tokens: Mapping[int, Sequence[str]], min_confidence: float = MIN_CONFIDENCE
) -> tuple[list[int], dict[int, Judgement]]:
    """Judge each feature (``{feature_id: top tokens}``); returns (kept ids in input order, all
    judgements)."""
    judgements = {int(k): judge.judge(int(k), list(toks), None) for k, toks in feature_tokens.items()}
    return [k for k, v in judgements.items() if keep(v, min_confidence)], judgements


# --------------------------------------------------------------------------- offline judge

_MARKERS = "\u0120\u2581\u010a"  # byte-level BPE space (Ġ), sentencepiece space (▁), BPE newline (Ċ)
_STRIP = string.whitespace + string.punctuation + _MARKERS


_WORD_START = (" ", "\n", "\u0120", "\u2581", "\u010a")
"""How a decoded token that starts a word begins: a space or newline, or GPT-2's / SentencePiece's markers."""


def normalise_token(token: str) -> str:
    """Decoded token -> lower case, without surrounding whitespace, punctuation or BPE space markers."""
    return token.strip(_STRIP).lower()


class LexiconJudge:
    """Offline judge: a feature is about the concept when most of its top tokens are concept terms.

    Rule. Take the first ``n_top`` (20) tokens, each normalised by :func:`normalise_token`
    (strip whitespace, punctuation and BPE space markers, lower-case). A token *belongs* to
    the concept if it equals a term or a word of a multi-word term, or if it has at least
    ``min_piece`` (3) characters and is a substring of some term (a subword piece such as
    ``"hog"`` of ``"hogwarts"``). Tokens that become empty are not counted, nor are word-internal
    fragments (no leading space or BPE space marker) shorter than ``min_piece`` that are not a
    term or a word of one (``"p"``, ``"ix"``): they say nothing either way (an LLM judge reading a
    feature's top tokens passes over them too), so one stray fragment does not sink a feature of
    ten names. Short words (``" of"``, ``" a"``) count.
    With ``f`` = belonging tokens / counted tokens: ``is_member = f >= member_fraction``
    (0.5) and ``confidence = f`` for a member, ``1 - f`` for a non-member (confidence in
    the judgement given). So with the keep threshold 0.85, a feature is kept iff at least
    85% of its counted top tokens are concept pieces. No counted token -> no judgement.
    ``description`` is ignored.
    """

    def __init__(self, terms: Iterable[str], member_fraction: float = 0.5, n_top: int = N_TOP_TOKENS,
                 min_piece: int = 3):
        if isinstance(terms, str):
            terms = [terms]
        self.terms = frozenset(t for t in (" ".join(str(x).lower().split()) for x in terms) if t)
        if not self.terms:
            raise ConfigError("LexiconJudge needs at least one non-empty concept term")
        if not 0 < member_fraction <= 1:
            raise ConfigError(f"member_fraction={member_fraction!r} must be in (0, 1]")
        self._words = frozenset(w for t in self.terms for w in re.findall(r"\w+", t))
        self.member_fraction = member_fraction
        self.n_top = n_top
        self.min_piece = min_piece

    def __repr__(self) -> str:
        return f"LexiconJudge({len(self.terms)} terms, member_fraction={self.member_fraction})"

    def countable(self, token: str) -> bool:
        """Whether a decoded token counts towards the fraction (see the class docstring)."""
        s = normalise_token(token)
        if not s:
            return False
        word_initial = token[:1] in _WORD_START
        return word_initial or len(s) >= self.min_piece or s in self.terms or s in self._words

    def belongs(self, token: str) -> bool:
        """Whether one decoded token is (a piece of) a concept term."""
        s = normalise_token(token)
        if not s:
            return False
        if s in self.terms or s in self._words:
            return True
        return len(s) >= self.min_piece and any(s in t for t in self.terms)

    def judge(self, feature_id: int, top_tokens: list[str], description: str | None = None) -> Judgement:
        counted = [t for t in list(top_tokens)[: self.n_top] if self.countable(t)]
        if not counted:
            return Judgement(None, 0.0, "no judgement: no countable top tokens")
        hits = [t for t in counted if self.belongs(t)]
        f = len(hits) / len(counted)
        member = f >= self.member_fraction
        reason = (f"{len(hits)}/{len(counted)} top tokens are concept terms: "
                  f"{[normalise_token(t) for t in hits][:10]}")
        return Judgement(member, f if member else 1.0 - f, reason)


def judge_from_sentences(
    concept_sentences: Sequence[str],
    neutral_sentences: Sequence[str],
    min_count: int = 2,
    min_ratio: float = 3.0,
    min_len: int = 3,
    **judge_kwargs,
) -> LexiconJudge:
    """A :class:`LexiconJudge` whose terms are words much more frequent in concept than neutral text.

    Words are lower-cased ``\\w+`` runs of at least ``min_len`` characters. A word is a
    term when it occurs at least ``min_count`` times in the concept sentences and its
    rate there is at least ``min_ratio`` times its add-one-smoothed rate in the neutral
    sentences: ``(c / N_c) / ((n + 1) / N_n) >= min_ratio`` (c, n: its counts; N_c, N_n:
    total words on each side).
    """
    def words(sentences):
        if isinstance(sentences, str):
            sentences = [sentences]
        return Counter(w for s in sentences for w in re.findall(r"\w+", s.lower()) if len(w) >= min_len)

    conc, neut = words(concept_sentences), words(neutral_sentences)
    n_c, n_n = max(sum(conc.values()), 1), max(sum(neut.values()), 1)
    terms = [w for w, c in conc.items() if c >= min_count and (c / n_c) / ((neut[w] + 1) / n_n) >= min_ratio]
    if not terms:
        raise DataError(
            f"no word is at least {min_ratio}x more frequent in the concept sentences than in the neutral "
            f"ones (min_count={min_count}); cannot build a LexiconJudge"
        )
    return LexiconJudge(terms, **judge_kwargs)


def edit_sentences(data) -> tuple[list[str], list[str]]:
    """``(concept_sentences, neutral_sentences)`` of an edit method's ``data`` mapping."""
    try:
        return list(data["concept_sentences"]), list(data["neutral_sentences"])
    except (KeyError, TypeError):
        raise DataError("edit methods need data with 'concept_sentences' and 'neutral_sentences'") from None


def concept_judge(data) -> Judge:
    """The judge for an edit method's ``data``: ``data['judge']``, else a :class:`LexiconJudge` of its
    ``exclusive_terms``, else one built from its sentences (:func:`judge_from_sentences`)."""
    if data.get("judge") is not None:
        return data["judge"]
    if data.get("exclusive_terms"):
        return LexiconJudge(data["exclusive_terms"])
    concept, neutral = edit_sentences(data)
    return judge_from_sentences(concept, neutral)
