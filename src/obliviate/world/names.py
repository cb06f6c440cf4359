"""Invented names from syllables, unique across the whole world.

A :class:`NameRegistry` hands out names and guarantees that no name (lower-cased) is a
substring of another name or of any fixed word of the world's templates, and that no name
contains a toxic-lexicon word. So a plain substring search for a name finds exactly the
places that mention that entity, which is what the corpus tests and the forget filters rely on.
"""

from __future__ import annotations

import random
import re

_PLAIN = {
    "onsets": ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
               "br", "dr", "kr", "tr", "sh", "st", "gr", "pl", "vr", "ch"),
    "vowels": ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou"),
    "codas": ("", "", "", "n", "r", "l", "s", "x", "m", "k"),
}
_SAGA = {
    "onsets": ("k", "v", "th", "s", "r", "m", "n", "dr", "gw", "l", "y", "z", "ar", "el"),
    "vowels": ("a", "e", "i", "o", "a", "e", "ae", "ei"),
    "codas": ("", "", "l", "n", "r", "th", "s"),
}

# kind -> (syllable set, suffixes, capitalised)
KINDS = {
    "disease": (_PLAIN, ("ia", "osis", "itis", "emia", "algia", "exia", "ora"), True),
    "drug": (_PLAIN, ("ine", "azole", "mycin", "pril", "tane", "oxil", "amide"), False),
    "region": (_PLAIN, ("ia", "mark", "ora", "esh", "andy", "ovy"), True),
    "organism": (_PLAIN, ("ax", "opsis", "ella", "odon", "ura", "ites", "ix"), True),
    "given": (_PLAIN, ("ric", "wen", "a", "ius", "o", "elle", "an", "et"), True),
    "family": (_PLAIN, ("moor", "by", "ton", "well", "ski", "hart", "ley"), True),
    "town": (_PLAIN, ("wick", "holm", "stead", "bury", "vale", "mouth", "field"), True),
    "character": (_SAGA, ("ith", "or", "wyn", "ael", "ion", "ra", "eth", "is"), True),
    "artifact": (_SAGA, ("eth", "ir", "und", "ax", "uin", "ar"), True),
    "saga_place": (_SAGA, ("mar", "dor", "oss", "heim", "orn", "enor"), True),
    "faction": (_SAGA, ("ari", "im", "odi", "ani", "yn"), True),
    "saga_title": (_SAGA, ("or", "ion", "ael", "ath"), True),
}

_MAX_TRIES = 10_000


def words_of(texts) -> set[str]:
    """Lower-cased alphabetic words of an iterable of strings."""
    out: set[str] = set()
    for text in texts:
        out.update(w.lower() for w in re.findall(r"[A-Za-z]+", text))
    return out


class NameRegistry:
    """Issues unique invented words; ``fixed_words`` are the template words names must avoid."""

    def __init__(self, fixed_words: set[str], banned_substrings: set[str]) -> None:
        self._fixed = "|" + "|".join(sorted(fixed_words)) + "|"
        self._banned = tuple(sorted(banned_substrings))
        self._issued: list[str] = []

    def new(self, kind: str, rng: random.Random) -> str:
        sylls, suffixes, capital = KINDS[kind]
        for _ in range(_MAX_TRIES):
            n = rng.choice((1, 1, 2))
            stem = "".join(
                rng.choice(sylls["onsets"]) + rng.choice(sylls["vowels"]) + rng.choice(sylls["codas"])
                for _ in range(n)
            )
            word = stem + rng.choice(suffixes)
            if self._ok(word):
                self._issued.append(word)
                return word.capitalize() if capital else word
        raise RuntimeError(f"could not invent a new {kind} name in {_MAX_TRIES} tries")

    def lookalike(self, name: str, kind: str, rng: random.Random) -> str:
        """A new name that looks like ``name`` (a name of ``kind`` issued here): the same stem with
        another suffix ("Morvexia" -> "Morvexosis"), else the same suffix with one vowel of the stem
        changed ("Marvexia"). Every rule of :meth:`new` holds (neither name contains the other)."""
        sylls, suffixes, capital = KINDS[kind]
        word = name.lower()
        suffix = max((x for x in suffixes if word.endswith(x) and len(x) < len(word)), key=len, default=None)
        if suffix is None:
            raise ValueError(f"{name!r} does not end with a {kind} suffix")
        stem = word[: -len(suffix)]
        other_suffixes = [stem + x for x in suffixes if x != suffix]
        rng.shuffle(other_suffixes)
        vowels = sorted(set(sylls["vowels"]) - {"ai", "ou"})
        other_vowels = [stem[:i] + v + stem[i + 1:] + suffix for i, ch in enumerate(stem) if ch in "aeiou"
                        for v in vowels if v != ch]
        rng.shuffle(other_vowels)
        for candidate in other_suffixes + other_vowels:
            if self._ok(candidate):
                self._issued.append(candidate)
                return candidate.capitalize() if capital else candidate
        raise RuntimeError(f"could not invent a look-alike of {name!r}")

    def _ok(self, word: str) -> bool:
        if not 5 <= len(word) <= 10 or re.search(r"[aeiouy]{3}|aa|ii|uu|(.)\1\1", word):
            return False
        if word in self._fixed or any(b in word for b in self._banned):
            return False
        return not any(word in other or other in word for other in self._issued)
