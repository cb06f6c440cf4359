"""EMBER step 2b: does a candidate feature belong to the concept? (the judge)

The paper shows the top-20 tokens of each high-mass-ratio feature to a hosted LLM, which
writes a one-sentence description and answers JSON ``{is_member, confidence}``; a feature
is kept when ``is_member`` and ``confidence >= 0.85`` (docs/methods.md). Here a judge is
anything with a ``judge(feature_id, top_tokens, description) -> Judgement`` method:

* :class:`LexiconJudge` — offline default, no network: the share of the top tokens that
  are pieces of known concept terms.
* :class:`HTTPJudge` — any OpenAI-compatible chat-completions endpoint (a hosted API, a local vLLM or Ollama
  server) through the ``openai`` client (the optional extra ``obliviate[judge]``), with timeouts, bounded retries
  and an on-disk cache.

A judge never raises for a bad reply: it returns ``Judgement(is_member=None, ...)``
("no judgement"), which is never kept.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import os
import re
import string
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from obliviate.config import show
from obliviate.errors import ConfigError, DataError
from obliviate.runs.results import REDACTED, secret_forms

log = logging.getLogger(__name__)

MIN_CONFIDENCE = 0.85
"""A feature is kept when its judgement says member with at least this confidence."""

N_TOP_TOKENS = 20

API_KEY_ENV = "OBLIVIATE_JUDGE_API_KEY"

MAX_REPLY_BYTES = 4 * 2**20
"""The most a judge reads of one reply (4 MiB); a larger reply is no judgement, and is not read whole."""


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
    """Judge each feature (``{feature_id: top tokens}``); returns (kept ids in input order, all judgements)."""
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
        reason = f"{len(hits)}/{len(counted)} top tokens are concept terms: {[normalise_token(t) for t in hits][:10]}"
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
            f"no word is at least {min_ratio}x more frequent in the concept sentences than in the neutral ones "
            f"(min_count={min_count}); cannot build a LexiconJudge"
        )
    return LexiconJudge(terms, **judge_kwargs)


# --------------------------------------------------------------------------- HTTP judge

SYSTEM_PROMPT = (
    "You audit features of a language model's token embeddings. Each feature is shown as the tokens "
    "that load on it most strongly. Decide whether the feature is specifically about the target concept. "
    'Answer with one JSON object only, no other text: {"is_member": true or false, "confidence": a number '
    'from 0 to 1, "description": "one sentence describing what the tokens have in common"}.'
)


class _Secret:
    """Holds the API key; prints as '***' so repr/vars/logs never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str | None):
        self._value = value

    def get(self) -> str | None:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "'***'" if self._value else "None"

    __str__ = __repr__

    def __reduce__(self):  # never pickle the key
        return (_Secret, (None,))


def _check_key(key: str | None, where: str) -> str | None:
    """The API key without surrounding whitespace (a key read from a file keeps its newline); a key with an
    invisible, control or non-ASCII character inside is refused, naming the character, never the key."""
    if key is None:
        return None
    key = str(key).strip()
    for i, ch in enumerate(key):
        if not "\x21" <= ch <= "\x7e":
            raise ConfigError(
                f"HTTPJudge: the API key ({where}) has an invisible, control or non-ASCII character U+{ord(ch):04X} "
                f"at position {i + 1} of {len(key)}; API keys are printable ASCII, check how it was copied")
    return key or None


def _split_credentials(base_url: str) -> tuple[str, str | None]:
    """``http://user:pass@host/v1`` -> (``http://host/v1``, ``'user:pass'``); the URL is returned as is without."""
    parts = urllib.parse.urlsplit(base_url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return base_url, None
    user, _, password = userinfo.partition(":")
    plain = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    return plain, f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"


CLIENT_LOGGERS = ("openai", "httpx", "httpx2", "httpcore", "httpcore2")
"""The packages under the ``openai`` client whose log records a request's filter masks (their debug lines carry the
request's headers, and the server's reason phrase, which may echo the key)."""


class _Masked(logging.Filter):
    """Masks the key and ``base_url``'s credentials in every record of the client's loggers during a request."""

    def __init__(self, redact):
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = self.redact(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


def _client_loggers() -> list[logging.Logger]:
    return [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict)
            if name.split(".")[0] in CLIENT_LOGGERS]


class _Malformed(Exception):
    pass


class _Retryable(Exception):
    pass


class _TooLarge(Exception):
    pass


class HTTPJudge:
    """Judge with an OpenAI-compatible chat-completions endpoint through the ``openai`` client.

    Sends ``client.chat.completions.create`` (``{base_url}/chat/completions``) a system and a user message and expects
    the assistant message to be JSON ``{"is_member": bool, "confidence": float in [0, 1],
    "description": str}`` (a ```json fence around it is tolerated).

    * The client's own retries are off (``max_retries=0``): the judge's loop below is the only one.
    * Timeouts (``timeout`` s in all per request, however slowly the server answers), connection
      errors, 5xx/429 answers and malformed replies are retried up to ``retries`` more times, sleeping
      ``backoff``, ``2 * backoff``, ``4 * backoff``, ... s in between; after that:
      ``Judgement(None, 0.0, "no judgement: ...")``.
    * Other 4xx answers (bad key, bad model name) are not retried: no judgement, with the status.
    * Redirects are not followed (the key would go to wherever they point): no judgement, naming where to.
    * A reply of more than ``max_reply_bytes`` (4 MiB) is not read whole: no judgement, not retried.
    * ``judge()`` never raises.
    * With ``cache_dir``, each judgement is stored as ``<sha256(model, messages)>.json`` and a
      repeated question is answered from disk without a request. Only real judgements are
      cached (not "no judgement"), so an outage is not remembered.
    * The API key (``api_key`` or env ``OBLIVIATE_JUDGE_API_KEY``) is sent only in the
      ``Authorization`` header; it is never logged, shown by ``repr``, pickled, cached, or
      put in a judgement (it is also masked, in every form, in any server or error text that echoes it).
      Surrounding whitespace is stripped from it; a key with an invisible or control character inside
      is refused. Credentials in ``base_url`` (``http://user:pass@host``) are sent as HTTP basic auth
      when there is no API key, and are kept out of ``base_url``, ``repr`` and logs like the key.

    ``concept`` (keyword-only, required) names the target concept in the prompt.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 20,
                 retries: int = 3, backoff: float = 0.5, cache_dir: str | os.PathLike | None = None, *,
                 concept: str, temperature: float = 0.0, max_reply_bytes: int = MAX_REPLY_BYTES):
        base_url, userinfo = _split_credentials(str(base_url or ""))
        if not base_url or not base_url.startswith(("http://", "https://")):
            shown = f"***@{base_url.rpartition('@')[2]}" if "@" in base_url else base_url  # no credentials
            raise ConfigError(f"HTTPJudge: base_url={show(shown)} must start with http:// or https://")
        if not model:
            raise ConfigError("HTTPJudge: model name is empty")
        if not concept or not str(concept).strip():
            raise ConfigError("HTTPJudge: concept is empty")
        if not timeout > 0 or retries < 0 or not backoff >= 0 or not max_reply_bytes >= 1 \
                or not math.isfinite(timeout) or not math.isfinite(backoff):
            raise ConfigError(f"HTTPJudge: timeout={timeout}, retries={retries}, backoff={backoff}, "
                              f"max_reply_bytes={max_reply_bytes} out of range")
        if api_key is not None:
            key = _check_key(api_key, "api_key")
        else:
            key = _check_key(os.environ.get(API_KEY_ENV) or None, f"${API_KEY_ENV}")
        if key and userinfo:
            raise ConfigError("HTTPJudge: base_url holds credentials (user:***@) and an API key is given too "
                              f"(api_key or ${API_KEY_ENV}); give one of them")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.concept = str(concept).strip()
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.temperature = float(temperature)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_reply_bytes = int(max_reply_bytes)
        self._api_key = _Secret(key)
        self._userinfo = _Secret(userinfo)
        self._given_key = _Secret(api_key if isinstance(api_key, str) else None)  # as given, for masking only
        self.n_requests = 0
        """Requests actually sent (cache hits do not count)."""

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        auth = ", credentials in base_url='***'" if self._userinfo else ""
        return (f"HTTPJudge(base_url={self.base_url!r}, model={self.model!r}, concept={self.concept!r}, "
                f"api_key={key}{auth}, timeout={self.timeout}, retries={self.retries}, cache_dir={self.cache_dir!r})")

    # ------------------------------------------------------------------ prompt and cache

    def messages(self, feature_id: int, top_tokens: Sequence[str], description: str | None = None) -> list[dict]:
        tokens = json.dumps(list(top_tokens), ensure_ascii=False)
        user = f"Target concept: {self.concept}\nTop tokens of feature {feature_id} (strongest first): {tokens}\n"
        if description:
            user += f"A previous description of this feature: {description}\n"
        user += f"Is this feature specifically about {self.concept}? Answer with the JSON object only."
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    def _cache_path(self, messages: list[dict]) -> Path | None:
        if self.cache_dir is None:
            return None
        blob = json.dumps({"model": self.model, "messages": messages}, sort_keys=True, ensure_ascii=False)
        return self.cache_dir / f"{hashlib.sha256(blob.encode()).hexdigest()}.json"

    def _read_cache(self, path: Path | None) -> Judgement | None:
        if path is None or not path.is_file():
            return None
        try:
            entry = json.loads(path.read_text())
            # Entries written before the rename say "verdict": still read them (each one a paid API call).
            v = entry["judgement"] if "judgement" in entry else entry["verdict"]
            return Judgement(v["is_member"], float(v["confidence"]), str(v["reason"]), v.get("description"))
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable judge cache file %s: %s", path, e)
            return None

    def _write_cache(self, path: Path | None, judgement: Judgement) -> None:
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"model": self.model, "judgement": judgement.to_dict()}, indent=1))
            os.replace(tmp, path)
        except OSError as e:
            log.warning("could not write judge cache file %s: %s", path, e)

    # ------------------------------------------------------------------ request

    def _redact(self, text: str) -> str:
        """``text`` with the key and base_url's credentials masked, in every form (:func:`secret_forms`)."""
        userinfo = self._userinfo.get() or ""
        secrets = (self._given_key.get(), self._api_key.get(), userinfo, userinfo.partition(":")[2])
        for form in sorted({f for x in secrets for f in secret_forms(x)}, key=len, reverse=True):
            text = text.replace(form, REDACTED)
        return text

    def _client(self, hooks: list):
        """An ``openai.OpenAI`` client for one request: no retries of its own, no redirects followed (the key would
        go to wherever they point), the reply read through ``hooks`` (the size cap); basic auth from ``base_url``'s
        credentials where there is no API key (:meth:`_auth`)."""
        try:
            import httpx2 as httpx
        except ImportError:
            import httpx
        try:
            import openai
        except ImportError:
            raise ConfigError("HTTPJudge needs the 'openai' package: pip install 'obliviate[judge]'") from None
        http = httpx.Client(follow_redirects=False, timeout=self.timeout, event_hooks={"response": hooks})
        return openai.OpenAI(base_url=self.base_url, api_key=self._api_key.get() or "none", max_retries=0,
                             timeout=self.timeout, http_client=http)

    def _auth(self) -> dict:
        """The request's ``Authorization`` header, set on each request (so the client adds none of its own): the
        key as a bearer token, else ``base_url``'s credentials as basic auth, else none at all."""
        import openai

        if self._api_key:
            return {"Authorization": f"Bearer {self._api_key.get()}"}
        if self._userinfo:
            return {"Authorization": "Basic " + base64.b64encode(self._userinfo.get().encode()).decode()}
        return {"Authorization": openai.Omit()}

    def _capped(self, response) -> None:
        """Response hook: a reply larger than ``max_reply_bytes`` (declared, or streamed without a length) is not
        read beyond the cap."""
        size = response.headers.get("Content-Length", "")
        if size.strip().isdigit() and int(size) > self.max_reply_bytes:
            raise _TooLarge(f"reply of {int(size)} bytes is larger than {self.max_reply_bytes}")
        chunks, n = [], 0
        for chunk in response.iter_bytes():
            n += len(chunk)
            if n > self.max_reply_bytes:
                raise _TooLarge(f"reply is larger than {self.max_reply_bytes} bytes")
            chunks.append(chunk)
        response._content = b"".join(chunks)  # read once, here; the client's own read returns it

    def _post(self, messages: list[dict]) -> bytes:
        """One request through ``openai``, the raw reply body; ``timeout`` bounds the whole request (a server that
        answers a byte at a time is cut off: the request runs in a worker thread whose client is closed)."""
        self.n_requests += 1
        client = self._client([self._capped])
        box: dict = {}

        masked = _Masked(self._redact)
        loggers = _client_loggers()
        for logger in loggers:
            logger.addFilter(masked)

        def request():
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model=self.model, messages=messages, temperature=self.temperature,
                    extra_headers={"Accept": "application/json", **self._auth()})
                box["body"] = raw.http_response.content
            except BaseException as e:  # handed to the caller
                box["error"] = e
            finally:
                for logger in loggers:
                    logger.removeFilter(masked)

        worker = threading.Thread(target=request, daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            client.close()
            raise TimeoutError
        client.close()
        if "error" in box:
            raise box["error"]
        return box["body"]

    @staticmethod
    def _parse(raw: bytes) -> Judgement:
        try:
            reply = json.loads(raw)
        except ValueError:
            raise _Malformed("response body is not JSON") from None
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise _Malformed("response has no choices[0].message.content") from None
        if not isinstance(content, str):
            raise _Malformed("message content is not a string")
        text = content.strip()
        fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, flags=re.S)
        if fence:
            text = fence.group(1)
        try:
            obj = json.loads(text)
        except ValueError:
            raise _Malformed("message content is not JSON") from None
        if not isinstance(obj, dict):
            raise _Malformed("message content is not a JSON object")
        member, conf, desc = obj.get("is_member"), obj.get("confidence"), obj.get("description")
        if not isinstance(member, bool):
            raise _Malformed("is_member is missing or not a boolean")
        if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0 <= conf <= 1:
            raise _Malformed("confidence is missing or not a number in [0, 1]")
        if desc is not None and not isinstance(desc, str):
            raise _Malformed("description is not a string")
        return Judgement(member, float(conf), desc or "(the judge gave no description)", desc)

    def _ask_once(self, messages: list[dict]) -> Judgement:
        """One request. Raises _Retryable / _Malformed, or returns a judgement (a no-judgement for fatal 4xx)."""
        import openai

        try:
            raw = self._post(messages)
        except _TooLarge as e:
            return Judgement(None, 0.0, f"no judgement: {e}, not read whole, not retried")
        except openai.APIStatusError as e:
            status = e.status_code
            if status >= 500 or status in (408, 429):
                raise _Retryable(f"HTTP {status}") from None
            if 300 <= status < 400:
                location = e.response.headers.get("Location", "")
                where = urllib.parse.urljoin(self.base_url + "/", _split_credentials(location)[0])
                return Judgement(None, 0.0, f"no judgement: HTTP {status} redirect to {self._redact(where)[:200]!r} "
                                          "not followed (the API key goes to base_url only; set base_url to the "
                                          "address that answers), not retried")
            reason = e.response.reason_phrase or type(e).__name__
            return Judgement(None, 0.0, f"no judgement: HTTP {status} ({self._redact(reason)}), not retried")
        except (TimeoutError, openai.APITimeoutError):
            raise _Retryable(f"timed out after {self.timeout:g} s") from None
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e
            raise _Retryable(f"connection error: {self._redact(str(cause))}") from None
        except (ConnectionError, OSError) as e:
            raise _Retryable(f"connection error: {self._redact(type(e).__name__ + ': ' + str(e))}") from None
        try:
            v = self._parse(raw)
        except _Malformed as e:
            raise _Malformed(self._redact(str(e))) from None
        # The server's text ends up in caches and results: mask the key if it echoes it.
        desc = self._redact(v.description) if v.description is not None else None
        return Judgement(v.is_member, v.confidence, self._redact(v.reason), desc)

    def judge(self, feature_id: int, top_tokens: list[str], description: str | None = None) -> Judgement:
        try:
            messages = self.messages(feature_id, top_tokens, description)
            path = self._cache_path(messages)
            cached = self._read_cache(path)
            if cached is not None:
                return cached
            last = "no attempt"
            for attempt in range(self.retries + 1):
                if attempt:
                    time.sleep(self.backoff * 2 ** (attempt - 1))
                try:
                    judgement = self._ask_once(messages)
                except (_Retryable, _Malformed) as e:
                    last = str(e)
                    log.warning("judge %s feature %s: attempt %d/%d failed: %s",
                                self.base_url, feature_id, attempt + 1, self.retries + 1, last)
                    continue
                if judgement.is_member is not None:
                    self._write_cache(path, judgement)
                else:
                    log.warning("judge %s feature %s: %s", self.base_url, feature_id, judgement.reason)
                return judgement
            return Judgement(None, 0.0, f"no judgement: {last} (after {self.retries + 1} attempts)")
        except Exception as e:  # judge() must never raise
            return Judgement(None, 0.0, f"no judgement: unexpected {type(e).__name__}: {self._redact(str(e))}")


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
