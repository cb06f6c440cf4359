"""A stand-in Hugging Face hub on the loopback address: the hub's HTTP shape for dataset repos, enough for
``datasets.load_dataset(repo, config, split=...)`` and ``huggingface_hub`` to resolve, list and download a repo's
files (``HF_ENDPOINT=http://127.0.0.1:PORT``). Nothing here touches obliviate's own loaders.

A repo is ``{path in repo: bytes}``; its ``README.md`` carries the ``configs:`` YAML the real hub repos use, so that
``datasets`` maps each config and split onto its files as it does on huggingface.co.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def readme(configs: dict[str, dict[str, str]]) -> bytes:
    """A dataset card whose YAML header declares ``configs`` (``{config: {split: path in repo}}``)."""
    lines = ["---", "configs:"]
    for name, splits in configs.items():
        lines += [f"- config_name: {name}", "  data_files:"]
        for split, path in splits.items():
            lines += [f"  - split: {split}", f"    path: {path}"]
    return ("\n".join(lines + ["---", "", "A stand-in dataset for obliviate's tests.", ""])).encode()


class StandInHub:
    """``with StandInHub({"owner/name": {path: bytes}}) as hub:`` serves the repos at ``hub.url``; ``hub.requests``
    lists each request line (method and path) it answered."""

    def __init__(self, repos: dict[str, dict[str, bytes]]):
        self.repos = repos
        self.requests: list[str] = []
        self.sha = {repo: hashlib.sha1(json.dumps(sorted((k, hashlib.sha1(v).hexdigest()) for k, v in files.items()))
                                       .encode()).hexdigest() for repo, files in repos.items()}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                self._answer(body=True)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n)
                self._answer(body=True)

            def _send(self, status, data: bytes, headers=(), body=True):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _json(self, obj, body=True):
                self._send(200, json.dumps(obj).encode(), [("Content-Type", "application/json")], body)

            def _answer(self, body: bool):
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                hub.requests.append(f"{self.command} {path}")
                repo, kind, rest = hub._route(path)
                if repo is None:
                    return self._send(404, b'{"error": "not found"}', [("X-Error-Code", "RepoNotFound")], body)
                files, sha = hub.repos[repo], hub.sha[repo]
                if kind == "info":
                    return self._json({"id": repo, "sha": sha, "private": False, "gated": False, "disabled": False,
                                       "downloads": 0, "likes": 0, "tags": [], "cardData": {},
                                       "lastModified": "2024-01-01T00:00:00.000Z",
                                       "siblings": [{"rfilename": f} for f in sorted(files)]}, body)
                if kind == "tree":
                    prefix = rest.strip("/")
                    entries, dirs = [], set()
                    for f in sorted(files):
                        if prefix and not f.startswith(prefix + "/"):
                            continue
                        tail = f[len(prefix) + 1:] if prefix else f
                        if "/" in tail and "recursive=true" not in self.path.lower():
                            d = (prefix + "/" if prefix else "") + tail.split("/", 1)[0]
                            if d not in dirs:
                                dirs.add(d)
                                entries.append({"type": "directory", "path": d, "oid": sha})
                            continue
                        entries.append({"type": "file", "path": f, "size": len(files[f]),
                                        "oid": hashlib.sha1(files[f]).hexdigest()})
                    return self._json(entries, body)
                if kind == "resolve":
                    if rest not in files:
                        return self._send(404, b"", [("X-Error-Code", "EntryNotFound"), ("X-Repo-Commit", sha)], body)
                    data = files[rest]
                    return self._send(200, data, [("X-Repo-Commit", sha),
                                                  ("ETag", f'"{hashlib.sha1(data).hexdigest()}"'),
                                                  ("Content-Type", "application/octet-stream")], body)
                return self._send(404, b"", [], body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _route(self, path: str):
        """``(repo, kind, rest)``: kind ``info`` (/api/datasets/R[/revision/V]), ``tree`` (/api/datasets/R/tree/V/P)
        or ``resolve`` (/datasets/R/resolve/V/P); ``(None, None, None)`` for anything else or an unknown repo."""
        for repo in self.repos:
            for head, kind in ((f"/api/datasets/{repo}/tree/", "tree"), (f"/datasets/{repo}/resolve/", "resolve")):
                if path.startswith(head):
                    _, _, rest = path[len(head):].partition("/")  # drop the revision
                    return repo, kind, rest
            if path == f"/api/datasets/{repo}" or path.startswith(f"/api/datasets/{repo}/revision/"):
                return repo, "info", ""
        return None, None, None

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def go_offline(monkeypatch, cache) -> None:
    """The hub as ``HF_HUB_OFFLINE=1`` with an empty cache leaves it, in this process: every ``datasets.load_dataset``
    fails before any request (``OfflineModeIsEnabled``), and the endpoint is a closed loopback port, so that nothing
    could reach the network even so. ``cache``: an empty directory for ``datasets``' and the hub's caches."""
    import datasets
    from huggingface_hub import constants

    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache / "datasets")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache / "hub"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
