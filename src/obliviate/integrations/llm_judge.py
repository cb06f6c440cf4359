"""EMBER's LLM judge: any OpenAI-compatible chat-completions endpoint (a hosted API, a local vLLM or Ollama
server) answers whether a feature's top tokens are about the concept, through the ``openai`` client (the
optional extra ``obliviate[judge]``) with its own timeout and retries (docs/methods.md, docs/bad-input.md)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from obliviate.config import show
from obliviate.errors import ConfigError
from obliviate.methods.ember.judge import Judgement
from obliviate.runs.results import REDACTED, secret_forms

log = logging.getLogger(__name__)

API_KEY_ENV = "OBLIVIATE_JUDGE_API_KEY"

MAX_REPLY_BYTES = 4 * 2**20
"""The most a judge reads of one reply (4 MiB); a larger reply is no judgement, and is not read whole."""

SYSTEM_PROMPT = (
    "You audit features of a language model's token embeddings. Each feature is shown as the tokens "
    "that load on it most strongly. Decide whether the feature is specifically about the target concept. "
    'Answer with one JSON object only, no other text: {"is_member": true or false, "confidence": a number '
    'from 0 to 1, "description": "one sentence describing what the tokens have in common"}.'
)

CLIENT_LOGGERS = ("openai", "httpx", "httpx2", "httpcore", "httpcore2")
"""The packages under the ``openai`` client whose log records a request's filter masks (their lines carry the
server's reason phrase, which may echo the key)."""


class _Secret:
    """Holds the API key; prints as '***' so repr/vars/logs never show it, and never pickles it."""

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

    def __reduce__(self):
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
                f"HTTPJudge: the API key ({where}) has an invisible, control or non-ASCII character "
                f"U+{ord(ch):04X} at position {i + 1} of {len(key)}; "
                "API keys are printable ASCII, check how it was copied")
    return key or None


def _split_credentials(base_url: str) -> tuple[str, str | None]:
    """``http://user:pass@host/v1`` -> (``http://host/v1``, ``'user:pass'``); the URL is returned as is
    without."""
    parts = urllib.parse.urlsplit(base_url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return base_url, None
    user, _, password = userinfo.partition(":")
    plain = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    return plain, f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"


class _Masked(logging.Filter):
    """Masks the key and ``base_url``'s credentials in every record of a logger."""

    def __init__(self, redact):
        super().__init__()
        self.redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        masked = self.redact(text)
        if masked != text:
            record.msg, record.args = masked, None
        return True


@contextlib.contextmanager
def _masked_logs(redact):
    """While open, every record of the client's loggers (:data:`CLIENT_LOGGERS`) is masked by ``redact``."""
    loggers = [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict)
               if name.split(".")[0] in CLIENT_LOGGERS]
    masked = _Masked(redact)
    for logger in loggers:
        logger.addFilter(masked)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(masked)


class _Malformed(Exception):
    pass


class ReplyTooLarge(Exception):
    """A reply longer than ``max_reply_bytes``: not read whole, not retried."""


def _attempts(n: int) -> str:
    return ", not retried" if n <= 1 else f" (after {n} attempts)"


class HTTPJudge:
    """Judge with an OpenAI-compatible chat-completions endpoint through the ``openai`` client.

    Sends ``client.chat.completions.create`` (``{base_url}/chat/completions``) a system and a user message and
    expects the assistant message to be JSON ``{"is_member": bool, "confidence": float in [0, 1],
    "description": str}`` (a ```json fence around it is tolerated).

    * ``timeout`` (s) is the ``openai`` client's: connecting, and each wait for the server, ends after it; the
      reply's body must also arrive within ``timeout`` of the request being sent (a server that dribbles it is
      cut off).
    * ``retries`` is the client's ``max_retries``: timeouts, connection errors and HTTP 408, 409, 429 and 5xx
      answers are retried that many times, with the client's backoff (0.5 s, doubling, at most 8 s, or the
      server's ``Retry-After``); after that: ``Judgement(None, 0.0, "no judgement: ... (after N attempts)")``.
    * Other 4xx answers (bad key, bad model name) and malformed replies are not retried: no judgement, saying
      why.
    * Redirects are not followed (the key would go to wherever they point): no judgement, naming where to.
    * A reply of more than ``max_reply_bytes`` (4 MiB) is not read whole: no judgement, not retried (the reply
      is asked uncompressed, and a compressed one is refused, so the cap is on what is decoded).
    * ``judge()`` never raises.
    * With ``cache_dir``, each judgement is stored as ``<sha256(model, messages)>.json`` and a repeated
      question is answered from disk without a request. Only real judgements are cached (not "no judgement"),
      so an outage is not remembered.
    * The API key (``api_key`` or env ``OBLIVIATE_JUDGE_API_KEY``) is sent only in the ``Authorization``
      header to ``base_url``; it is never logged, shown by ``repr``, pickled, cached, or put in a judgement
      (it is also masked, in every form, in any server or error text that echoes it). Surrounding whitespace
      is stripped from it; a key with an invisible or control character inside is refused. Credentials in
      ``base_url`` (``http://user:pass@host``) are sent as HTTP basic auth when there is no API key, and are
      kept out of ``base_url``, ``repr`` and logs like the key. With neither, no ``Authorization`` header is
      sent (``$OPENAI_API_KEY`` is never read).

    ``concept`` (keyword-only, required) names the target concept in the prompt.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 20,
                 retries: int = 3, cache_dir: str | os.PathLike | None = None, *,
                 concept: str, temperature: float = 0.0, max_reply_bytes: int = MAX_REPLY_BYTES):
        base_url, userinfo = _split_credentials(str(base_url or ""))
        if not base_url or not base_url.startswith(("http://", "https://")):
            shown = f"***@{base_url.rpartition('@')[2]}" if "@" in base_url else base_url  # no credentials
            raise ConfigError(f"HTTPJudge: base_url={show(shown)} must start with http:// or https://")
        if not model:
            raise ConfigError("HTTPJudge: model name is empty")
        if not concept or not str(concept).strip():
            raise ConfigError("HTTPJudge: concept is empty")
        if not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ConfigError(f"HTTPJudge: timeout={timeout!r} must be a number of seconds > 0")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"HTTPJudge: retries={retries!r} must be a whole number >= 0")
        if isinstance(max_reply_bytes, bool) or not isinstance(max_reply_bytes, int) or max_reply_bytes < 1:
            raise ConfigError(f"HTTPJudge: max_reply_bytes={max_reply_bytes!r} must be a whole number >= 1")
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
        self.retries = retries
        self.temperature = float(temperature)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_reply_bytes = int(max_reply_bytes)
        self._api_key = _Secret(key)
        self._userinfo = _Secret(userinfo)
        self._given_key = _Secret(api_key if isinstance(api_key, str) else None)  # as given, for masking only
        self.n_requests = 0
        """Requests actually sent, retries included (cache hits do not count)."""

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        auth = ", credentials in base_url='***'" if self._userinfo else ""
        return (f"HTTPJudge(base_url={self.base_url!r}, model={self.model!r}, concept={self.concept!r}, "
                f"api_key={key}{auth}, timeout={self.timeout}, retries={self.retries}, "
                f"cache_dir={self.cache_dir!r})")

    # ------------------------------------------------------------------ prompt and cache

    def messages(self, feature_id: int, top_tokens: Sequence[str],
                 description: str | None = None) -> list[dict]:
        tokens = json.dumps(list(top_tokens), ensure_ascii=False)
        user = (f"Target concept: {self.concept}\nTop tokens of "
                f"feature {feature_id} (strongest first): {tokens}\n")
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
        # as the header carries them
        basic = base64.b64encode(userinfo.encode()).decode() if userinfo else None
        secrets = (self._given_key.get(), self._api_key.get(), userinfo, userinfo.partition(":")[2], basic)
        for form in sorted({f for x in secrets for f in secret_forms(x)}, key=len, reverse=True):
            text = text.replace(form, REDACTED)
        return text

    def _auth(self, openai) -> dict:
        """The request's ``Authorization`` header in place of the client's: none with the key (the client's
        own ``Bearer`` is right), ``base_url``'s credentials as basic auth, else none at all."""
        if self._api_key:
            return {}
        if self._userinfo:
            return {"Authorization": "Basic " + base64.b64encode(self._userinfo.get().encode()).decode()}
        return {"Authorization": openai.Omit()}

    def _post(self, messages: list[dict]) -> bytes:
        """One question through ``openai`` (its retries included); the raw body of the reply."""
        try:
            import openai
        except ImportError:
            raise ConfigError("HTTPJudge needs the 'openai' package: "
                              "pip install 'obliviate[judge]'") from None
        try:
            import httpx2 as httpx
        except ImportError:
            import httpx
        sent = [0.0]

        def on_request(request) -> None:
            self.n_requests += 1
            sent[0] = time.monotonic()

        def on_response(response) -> None:
            """The reply's body, read here within ``max_reply_bytes`` and the time left, handed on as read."""
            size = response.headers.get("Content-Length", "")
            if size.strip().isdigit() and int(size) > self.max_reply_bytes:
                raise ReplyTooLarge(f"reply of {int(size)} bytes is larger than {self.max_reply_bytes}")
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise ReplyTooLarge(f"reply is compressed ({encoding}) though "
                                    "none was asked; its size is unknown")
            chunks, n = [], 0
            try:
                for chunk in response.stream:
                    n += len(chunk)
                    if n > self.max_reply_bytes:
                        raise ReplyTooLarge(f"reply is larger than {self.max_reply_bytes} bytes")
                    if time.monotonic() - sent[0] > self.timeout:
                        raise httpx.ReadTimeout(f"the reply took over {self.timeout:g} s")
                    chunks.append(chunk)
            finally:
                response.stream.close()
            response.stream = httpx.ByteStream(b"".join(chunks))

        http = openai.DefaultHttpxClient(follow_redirects=False,
                                         event_hooks={"request": [on_request], "response": [on_response]})
        with _masked_logs(self._redact), openai.OpenAI(
                base_url=self.base_url, api_key=self._api_key.get() or "none", timeout=self.timeout,
                max_retries=self.retries, http_client=http) as client:
            raw = client.chat.completions.with_raw_response.create(
                model=self.model, messages=messages, temperature=self.temperature,
                extra_headers={"Accept": "application/json", "Accept-Encoding": "identity",
                               **self._auth(openai)})
            return raw.http_response.content

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

    def _ask(self, messages: list[dict]) -> Judgement:
        """The judgement of one question, or a no-judgement saying why (the ``openai`` client's retries
        done)."""
        import openai

        def no(why: str) -> Judgement:
            return Judgement(None, 0.0, f"no judgement: {self._redact(why)}")

        before = self.n_requests
        try:
            raw = self._post(messages)
        except ReplyTooLarge as e:
            return no(f"{e}, not read whole, not retried")
        except openai.APIStatusError as e:
            status, tries = e.status_code, _attempts(self.n_requests - before)
            if 300 <= status < 400:
                location = e.response.headers.get("Location", "")
                where = urllib.parse.urljoin(self.base_url + "/", _split_credentials(location)[0])
                return no(f"HTTP {status} redirect to {self._redact(where)[:200]!r} not followed (the API "
                          f"key goes to base_url only; set base_url to the address that answers){tries}")
            return no(f"HTTP {status} ({e.response.reason_phrase or type(e).__name__}){tries}")
        except openai.APITimeoutError:
            return no(f"timed out after {self.timeout:g} s{_attempts(self.n_requests - before)}")
        except openai.APIConnectionError as e:
            return no(f"connection error: {e.__cause__ or e}{_attempts(self.n_requests - before)}")
        try:
            v = self._parse(raw)
        except _Malformed as e:
            return no(f"{e}, not retried")
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
            judgement = self._ask(messages)
            if judgement.is_member is not None:
                self._write_cache(path, judgement)
            else:
                log.warning("judge %s feature %s: %s", self.base_url, feature_id, judgement.reason)
            return judgement
        except Exception as e:  # judge() must never raise
            return Judgement(None, 0.0, f"no judgement: unexpected {type(e).__name__}: "
                                        f"{self._redact(str(e))}")
