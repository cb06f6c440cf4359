"""EMBER's LLM judge (``obliviate.integrations.llm_judge.HTTPJudge``) against local stub servers: good, fenced and
malformed replies, timeouts, refused connections, retries after a 5xx, the cache, redirects, the size cap, and the
API key kept out of everything it writes."""

import json
import logging
import pickle
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from obliviate.errors import ConfigError
from obliviate.integrations.llm_judge import HTTPJudge
from obliviate.methods.ember.judge import Judgement

# --------------------------------------------------------------------------- HTTP stub server

KEY = "sk-test-SECRET-7f3a9c21e0"


def reply(content) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


GOOD = reply(json.dumps({"is_member": True, "confidence": 0.9, "description": "Wizard school words."}))


class Stub:
    """A local chat-completions server playing a script of (status, body[, sleep[, reason phrase]]) replies.

    The last reply repeats."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        self.extra_headers = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                stub.requests.append({"path": self.path, "headers": {k.title(): v for k, v in self.headers.items()},
                                      "body": json.loads(body)})
                status, payload, sleep, message = (*stub.script[min(len(stub.requests), len(stub.script)) - 1],
                                                   0, None)[:4]
                time.sleep(sleep)
                try:
                    self.send_response(status, message)
                    self.send_header("Content-Type", "application/json")
                    for name, value in stub.extra_headers:
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    servers = []

    def make(*script):
        servers.append(Stub(script))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def make_judge(url, **kw):
    kw = {"api_key": KEY, "timeout": 2.0, "retries": 1, "concept": "Harry Potter", **kw}
    return HTTPJudge(url, "judge-model", **kw)


def test_http_good_reply(stub):
    s = stub((200, GOOD))
    v = make_judge(s.url).judge(4, ["Hog", "warts"])
    assert v == Judgement(True, 0.9, "Wizard school words.", "Wizard school words.")
    (req,) = s.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {KEY}"
    assert req["body"]["model"] == "judge-model"
    assert [m["role"] for m in req["body"]["messages"]] == ["system", "user"]
    assert "Harry Potter" in req["body"]["messages"][1]["content"]
    assert '["Hog", "warts"]' in req["body"]["messages"][1]["content"]


def test_http_fenced_json_content_is_accepted(stub):
    s = stub((200, reply('```json\n{"is_member": false, "confidence": 1, "description": "Cats."}\n```')))
    v = make_judge(s.url).judge(0, ["cat"])
    assert v.is_member is False and v.confidence == 1.0


@pytest.mark.parametrize(
    "body, why",
    [
        (b"<html>oops</html>", "body is not JSON"),
        (json.dumps({"error": "no choices"}).encode(), "no choices"),
        (reply("I think yes, it is about Harry Potter."), "content is not JSON"),
        (reply(json.dumps({"is_member": "yes", "confidence": 0.9})), "is_member"),
        (reply(json.dumps({"is_member": True, "confidence": 1.5})), "confidence"),
        (reply(json.dumps({"is_member": True, "confidence": True})), "confidence"),
    ],
)
def test_http_malformed_replies_give_no_judgement_without_a_retry(stub, body, why):
    """A reply that arrived but does not hold a judgement is not asked again (the same question at temperature 0
    gets the same answer): one request, the reason says what was wrong."""
    s = stub((200, body))
    v = make_judge(s.url, retries=2).judge(0, ["x"])
    assert v.is_member is None and v.confidence == 0.0
    assert v.reason.startswith("no judgement") and why in v.reason and v.reason.endswith(", not retried")
    assert len(s.requests) == 1


def test_http_timeout_is_bounded(stub):
    s = stub((200, GOOD, 0.6))
    t0 = time.monotonic()
    v = make_judge(s.url, timeout=0.2, retries=1).judge(0, ["x"])
    elapsed = time.monotonic() - t0
    assert v.is_member is None and "timed out" in v.reason
    assert len(s.requests) == 2
    assert elapsed < 1.5


def test_http_connection_refused():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    j = make_judge(f"http://127.0.0.1:{port}", retries=2)
    v = j.judge(0, ["x"])
    assert v.is_member is None and "connection error" in v.reason and v.reason.endswith("(after 3 attempts)")
    assert j.n_requests == 3


def test_http_500_then_success_is_retried(stub):
    s = stub((500, b'{"error": "overloaded"}'), (200, GOOD))
    j = make_judge(s.url, retries=2)
    v = j.judge(0, ["x"])
    assert v.is_member is True and v.confidence == 0.9
    assert len(s.requests) == 2 and j.n_requests == 2


@pytest.mark.parametrize("status", [500, 503, 429])
def test_http_a_server_error_to_the_last_retry_is_no_judgement_naming_it(stub, status):
    s = stub((status, b'{"error": "overloaded"}'))
    v = make_judge(s.url, retries=1).judge(0, ["x"])
    assert v.is_member is None and v.reason.startswith(f"no judgement: HTTP {status} (")
    assert v.reason.endswith("(after 2 attempts)") and len(s.requests) == 2


def test_http_auth_error_is_not_retried(stub):
    s = stub((401, json.dumps({"error": f"Incorrect API key provided: {KEY}"}).encode()))
    v = make_judge(s.url, retries=3).judge(0, ["x"])
    assert v.is_member is None and "401" in v.reason and "not retried" in v.reason
    assert len(s.requests) == 1


def test_http_cache_hit_needs_no_request(stub, tmp_path):
    s = stub((200, GOOD))
    j = make_judge(s.url, cache_dir=tmp_path)
    first = j.judge(1, ["Hog", "warts"])
    assert j.judge(1, ["Hog", "warts"]) == first
    assert make_judge(s.url, cache_dir=tmp_path).judge(1, ["Hog", "warts"]) == first  # a new instance too
    assert len(s.requests) == 1 and len(list(tmp_path.glob("*.json"))) == 1
    assert set(json.loads(next(tmp_path.glob("*.json")).read_text())) == {"model", "judgement"}
    make_judge(s.url, cache_dir=tmp_path).judge(1, ["Other", "tokens"])  # a new question asks the server
    assert len(s.requests) == 2


def test_http_cache_entry_of_the_old_format_is_still_a_hit(stub, tmp_path):
    """A cache file written before the rename (key "verdict", not "judgement") is read: no request is sent."""
    s = stub((500, b"{}"))
    j = make_judge(s.url, cache_dir=tmp_path, retries=0)
    path = j._cache_path(j.messages(1, ["Hog", "warts"], None))
    old = Judgement(True, 0.9, "Wizard school words.", "Wizard school words.")
    path.write_text(json.dumps({"model": "judge-model", "verdict": old.to_dict()}))
    assert j.judge(1, ["Hog", "warts"]) == old
    assert s.requests == []


def test_http_no_judgement_is_not_cached(stub, tmp_path):
    s = stub((500, b"{}"), (500, b"{}"), (200, GOOD))
    j = make_judge(s.url, cache_dir=tmp_path, retries=1)
    assert j.judge(0, ["x"]).is_member is None
    assert list(tmp_path.glob("*.json")) == []
    assert j.judge(0, ["x"]).is_member is True


def test_api_key_never_leaks(stub, tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OBLIVIATE_JUDGE_API_KEY", KEY)
    s = stub(
        (401, json.dumps({"error": f"Incorrect API key provided: {KEY}"}).encode(), 0, f"Bad key {KEY}"),
        (500, json.dumps({"error": f"boom {KEY}"}).encode()),
        (200, reply("not json " + KEY)),
        (200, GOOD),
    )
    j = HTTPJudge(s.url, "judge-model", timeout=2.0, retries=3, cache_dir=tmp_path, concept="HP")
    judgements = [j.judge(0, ["a"]), j.judge(1, ["b"]), j.judge(1, ["b"]), j.judge(1, ["b"])]
    assert s.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"  # taken from the env var
    # 401 (the key in the reason phrase), then a 500 retried into a reply that is not JSON (quoting the key), then
    # a judgement, then the same question from the cache
    assert [v.is_member for v in judgements] == [None, None, True, True] and len(s.requests) == 4
    assert "HTTP 401 (Bad key ***), not retried" in judgements[0].reason
    places = {
        "repr": repr(j),
        "str": str(j),
        "vars": repr(vars(j)),
        "pickle": pickle.dumps(j).decode("latin-1"),
        "logs": caplog.text,
        "judgements": repr(judgements) + json.dumps([v.to_dict() for v in judgements]),
        "cache": "".join(p.read_text() for p in tmp_path.iterdir()),
    }
    assert places["cache"]  # something was cached
    assert "***" in places["repr"]
    for where, text in places.items():
        assert KEY not in text, where


def test_http_judge_config_errors():
    with pytest.raises(ConfigError):
        HTTPJudge("localhost:8000", "m", concept="x")
    with pytest.raises(ConfigError):
        HTTPJudge("http://localhost:8000", "m", concept=" ")
    for name, bad in [("retries", 1.5), ("retries", True), ("retries", -1), ("timeout", 0), ("timeout", float("nan")),
                      ("timeout", "20"), ("max_reply_bytes", 0)]:
        with pytest.raises(ConfigError, match=f"^HTTPJudge: {name}={bad!r} must be "):
            HTTPJudge("http://localhost:8000", "m", concept="x", **{name: bad})
    with pytest.raises(TypeError, match="backoff"):  # the client's backoff now; a setting that did nothing is refused
        HTTPJudge("http://localhost:8000", "m", concept="x", backoff=0.5)


def test_without_a_key_no_authorization_is_sent(stub, monkeypatch):
    """No key and no credentials in base_url (a local vLLM): no Authorization header, and the client does not take
    $OPENAI_API_KEY to another endpoint."""
    monkeypatch.delenv("OBLIVIATE_JUDGE_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    s = stub((200, GOOD))
    assert make_judge(s.url, api_key=None).judge(0, ["x"]).is_member is True
    assert "Authorization" not in s.requests[0]["headers"]


# --------------------------------------------------------------------------- hostile servers (issue 16)

def test_a_compressed_reply_is_refused_since_its_size_is_unknown(stub):
    """The judge asks for an uncompressed reply, so that the size cap is on what is decoded (a 4 MiB gzip can
    decode to gigabytes); a server that compresses anyway gets no judgement."""
    import gzip

    s = stub((200, gzip.compress(GOOD)))
    s.extra_headers = [("Content-Encoding", "gzip")]
    v = make_judge(s.url).judge(0, ["x"])
    assert s.requests[0]["headers"]["Accept-Encoding"] == "identity"
    assert v.is_member is None and "compressed (gzip)" in v.reason and len(s.requests) == 1


class RawServer:
    """A local server whose reply to each POST is written by ``answer(handler, n)`` (n: requests so far)."""

    def __init__(self, answer):
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests.append({"path": self.path, "headers": {k.title(): v for k, v in self.headers.items()}})
                try:
                    answer(self, len(server.requests))
                except OSError:
                    pass  # the client hung up

            do_GET = do_POST

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.url = self.origin + "/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def raw_server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    servers = []

    def make(answer):
        servers.append(RawServer(answer))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def send(handler, status, body, headers=()):
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("where", ["other origin", "same origin"])
def test_http_redirects_are_not_followed_and_the_key_stays_home(raw_server, status, where):
    """A 3xx used to be followed with the Authorization header (urllib copies it), and the other host's
    reply was taken as the judgement. Now no redirect is followed: no judgement, not retried, the key sent once."""
    other = raw_server(lambda h, n: send(h, 200, GOOD))
    target = other.url if where == "other origin" else None
    home = raw_server(lambda h, n: send(h, status, b"", [("Location", (target or home.url) + "/chat/completions")]))
    v = make_judge(home.url, retries=2).judge(0, ["x"])
    assert v.is_member is None and v.confidence == 0.0
    assert f"HTTP {status} redirect to" in v.reason and "not followed" in v.reason and "not retried" in v.reason
    assert other.requests == [] or where == "same origin"
    assert len(home.requests) == 1
    assert not [r for r in other.requests if KEY in str(r["headers"])]


def test_http_redirect_location_with_credentials_is_masked(raw_server):
    home = raw_server(lambda h, n: send(h, 302, b"", [("Location", f"http://me:{KEY}@10.0.0.1/steal?k={KEY}")]))
    v = make_judge(home.url).judge(0, ["x"])
    assert v.is_member is None and "redirect" in v.reason and KEY not in v.reason


def dribble(handler, n, gap=0.05, seconds=4.0):
    """Send the headers, then the body a byte at a time, each within any per-read timeout, for ``seconds`` in all."""
    body = GOOD + b" " * 200
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    handler.wfile.write(head)
    handler.wfile.flush()
    end = time.monotonic() + seconds
    for b in body:
        if time.monotonic() > end:
            return
        handler.wfile.write(bytes([b]))
        handler.wfile.flush()
        time.sleep(gap)


def test_http_a_dribbled_body_is_cut_at_timeout(raw_server):
    """A server that sends its body a byte every 0.05 s never trips a per-read timeout; it used to take 6.8 s
    against a 0.5 s timeout. The body must arrive within ``timeout`` of the request, each attempt."""
    s = raw_server(lambda h, n: dribble(h, n))
    t0 = time.monotonic()
    v = make_judge(s.url, timeout=0.5, retries=1).judge(0, ["x"])
    elapsed = time.monotonic() - t0
    assert v.is_member is None and "timed out after 0.5 s (after 2 attempts)" in v.reason
    assert len(s.requests) == 2
    assert elapsed < 4.0  # 2 x 0.5 s and the client's backoff (at most 0.5 s), not 2 x 4 s


def test_http_reply_size_is_capped(raw_server):
    """A 300 MB reply used to be read whole. A declared or streamed reply beyond max_reply_bytes is no judgement,
    not retried, and not read beyond the cap."""
    declared = raw_server(lambda h, n: (h.send_response(200), h.send_header("Content-Length", str(300 * 2**20)),
                                        h.end_headers(), h.wfile.write(b"{" * 1000)))
    t0 = time.monotonic()
    v = make_judge(declared.url, retries=2).judge(0, ["x"])
    assert v.is_member is None and f"reply of {300 * 2**20} bytes is larger than 4194304" in v.reason
    assert "not retried" in v.reason and len(declared.requests) == 1 and time.monotonic() - t0 < 1.5

    sent = []

    def stream(h, n):  # no Content-Length: the reply ends when the connection closes
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        for _ in range(64):
            h.wfile.write(b" " * 2**16)
            sent.append(2**16)

    streamed = raw_server(stream)
    v = make_judge(streamed.url, max_reply_bytes=2**20).judge(0, ["x"])
    assert v.is_member is None and "reply is larger than 1048576 bytes" in v.reason
    assert len(streamed.requests) == 1

    error = raw_server(lambda h, n: (h.send_response(500), h.send_header("Content-Length", str(300 * 2**20)),
                                     h.end_headers(), h.wfile.write(b"{" * 1000)))
    v = make_judge(error.url, retries=2).judge(0, ["x"])  # an error's body is capped too, before any retry
    assert f"reply of {300 * 2**20} bytes" in v.reason and len(error.requests) == 1
    with pytest.raises(ConfigError):
        make_judge(streamed.url, max_reply_bytes=0)


@pytest.mark.parametrize("key_from", ["api_key", "env"])
def test_a_key_with_a_trailing_newline_is_stripped_and_masked_in_every_form(raw_server, tmp_path, caplog,
                                                                              monkeypatch, key_from):
    """A key read from a file keeps its newline; it used to make http.client raise "Invalid header value
    b'Bearer sk-...\\n'", whose repr-escaped key passed the mask into judgements and results.json."""
    from obliviate.runs.results import write_results

    caplog.set_level(logging.DEBUG)
    forms = [KEY, repr(KEY + "\n"), json.dumps(KEY + "\n"), repr((KEY + "\n").encode()), KEY + "%0A"]
    echo = " | ".join(forms)

    def answer(h, n):
        if n == 1:
            send(h, 500, echo.encode())
        else:
            send(h, 200, reply(json.dumps({"is_member": True, "confidence": 0.9, "description": echo})))

    s = raw_server(answer)
    kw = {"api_key": KEY + "\n"} if key_from == "api_key" else {"api_key": None}
    monkeypatch.setenv("OBLIVIATE_JUDGE_API_KEY", KEY + "\r\n")
    j = make_judge(s.url, cache_dir=tmp_path / "cache", **kw)
    v = j.judge(0, ["x"])
    assert v.is_member is True
    assert s.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"  # the stripped key was sent
    error = f"unexpected ValueError: Invalid header value b'Bearer {KEY}\\r\\n'"
    write_results(tmp_path, seed=0, config={"note": error}, metrics={"judgement": v.to_dict()})
    texts = {"judgement": repr(v), "redacted": j._redact(error), "logs": caplog.text, "repr": repr(j) + repr(vars(j)),
             "results.json": (tmp_path / "results.json").read_text(),
             "cache": "".join(p.read_text() for p in (tmp_path / "cache").iterdir())}
    for where, text in texts.items():
        assert KEY not in text, where
    assert "***" in v.description


@pytest.mark.parametrize("bad", ["\u200b", "\x00", "\t", "\u00e9", " ", "\ufeff", "\x1b[31m"])
@pytest.mark.parametrize("key_from", ["api_key", "env"])
def test_keys_with_invisible_or_control_characters_are_refused_without_printing_the_key(monkeypatch, bad,
                                                                                         key_from):
    key = KEY[:6] + bad + KEY[6:]
    monkeypatch.delenv("OBLIVIATE_JUDGE_API_KEY", raising=False)
    if key_from == "env":
        if "\x00" in key:
            pytest.skip("an environment variable cannot hold a NUL")
        monkeypatch.setenv("OBLIVIATE_JUDGE_API_KEY", key)
    with pytest.raises(ConfigError) as e:
        HTTPJudge("http://127.0.0.1:9", "m", api_key=key if key_from == "api_key" else None, concept="HP")
    msg = str(e.value)
    assert f"U+{ord(bad[0]):04X} at position 7" in msg and "printable ASCII" in msg
    assert ("$OBLIVIATE_JUDGE_API_KEY" in msg) == (key_from == "env")
    assert KEY not in msg and KEY[:6] not in msg and KEY[7:] not in msg and "\n" not in msg


def test_credentials_in_base_url_never_show(raw_server, caplog, monkeypatch):
    """``http://user:pass@host`` used to show in repr and in log lines; now they go as basic auth only."""
    import base64

    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("OBLIVIATE_JUDGE_API_KEY", raising=False)
    password = "pa%40ss-SECRET-91b2"  # percent-encoded '@' in the URL
    s = raw_server(lambda h, n: send(h, 500 if n == 1 else 200, GOOD))
    url = s.url.replace("http://", f"http://judge-user:{password}@")
    j = HTTPJudge(url, "judge-model", timeout=2.0, retries=1, concept="HP")
    assert j.judge(0, ["x"]).is_member is True
    auth = s.requests[0]["headers"]["Authorization"]
    assert auth == "Basic " + base64.b64encode(b"judge-user:pa@ss-SECRET-91b2").decode()
    assert f"POST {s.url}/chat/completions" in caplog.text and "500" in caplog.text  # logged, the URL without them
    refused = HTTPJudge(url.replace(s.origin.rpartition(":")[2], "9"), "m", retries=0, concept="HP").judge(0, ["x"])
    texts = {"repr": repr(j), "str": str(j), "vars": repr(vars(j)), "pickle": pickle.dumps(j).decode("latin-1"),
             "base_url": j.base_url, "logs": caplog.text, "refused": repr(refused)}
    for where, text in texts.items():
        for secret in ("SECRET", password, "pa@ss", auth.partition(" ")[2]):
            assert secret not in text, where
    assert j.base_url == s.url and "credentials in base_url='***'" in repr(j)
    for bad in (f"judge-user:{password}@127.0.0.1:8000", url):
        with pytest.raises(ConfigError) as e:
            HTTPJudge(bad, "m", api_key=KEY, concept="HP") if bad == url else HTTPJudge(bad, "m", concept="HP")
        assert "SECRET" not in str(e.value) and KEY not in str(e.value)


def test_the_client_keeps_no_threads_and_touches_no_private_attributes():
    """Issue #58: the judge leans on the ``openai`` client's own timeout and retries; it starts no thread (the former
    watchdog) and writes no other object's private attribute (the former ``response._content``)."""
    import ast
    from pathlib import Path

    from obliviate.integrations import llm_judge

    tree = ast.parse(Path(llm_judge.__file__).read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "openai" in modules
    assert not {m.split(".")[0] for m in modules} & {"threading", "_thread", "concurrent", "multiprocessing", "signal"}
    private = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
               and not n.attr.startswith("__") and n.attr != "_replace"  # namedtuple's documented method
               and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]
    assert private == []
