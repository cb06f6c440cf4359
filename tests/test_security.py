"""Security: no unpickling of user files, API keys never written out, config output paths stay in the run dir."""

import ast
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import obliviate
from obliviate.errors import ConfigError

SRC = Path(obliviate.__file__).resolve().parent

# --------------------------------------------------------------------------- unsafe deserialisation / code execution


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _kw(call: ast.Call, name: str):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_true(node) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def unsafe_calls(source: str, filename: str = "<src>") -> list[str]:
    """``file:line: what`` for each unsafe call in ``source``.

    Unsafe: ``pickle``/``cPickle``/``dill``/``joblib``/``marshal`` ``load(s)``, ``pickle.Unpickler``,
    ``torch.load`` without ``weights_only=True``, ``numpy.load(allow_pickle=True)``, ``yaml.load`` /
    ``yaml.unsafe_load`` / ``yaml.full_load`` (use ``yaml.safe_load``), the builtins ``eval`` / ``exec`` /
    ``compile`` (``model.eval()`` is a method, not the builtin), ``subprocess`` with ``shell=True``,
    ``os.system``, and ``trust_remote_code=True`` as a literal argument (remote code must stay opt-in).
    """
    found = []
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        where = f"{filename}:{node.lineno}"
        last = name.rsplit(".", 1)[-1]
        if name.split(".")[0] in ("pickle", "cPickle", "dill", "joblib", "marshal", "shelve") and \
                last in ("load", "loads", "Unpickler", "open"):
            found.append(f"{where}: {name}")
        elif name == "torch.load" and not _is_true(_kw(node, "weights_only")):
            found.append(f"{where}: torch.load without weights_only=True")
        elif name in ("np.load", "numpy.load") and _is_true(_kw(node, "allow_pickle")):
            found.append(f"{where}: {name}(allow_pickle=True)")
        elif name in ("yaml.load", "yaml.unsafe_load", "yaml.full_load", "yaml.load_all", "yaml.unsafe_load_all"):
            found.append(f"{where}: {name} (use yaml.safe_load)")
        elif isinstance(node.func, ast.Name) and name in ("eval", "exec", "compile", "__import__"):
            found.append(f"{where}: builtin {name}()")
        elif name == "os.system" or (name.startswith("subprocess.") and _is_true(_kw(node, "shell"))):
            found.append(f"{where}: {name} through a shell")
        if _is_true(_kw(node, "trust_remote_code")):
            found.append(f"{where}: {name}(trust_remote_code=True)")
    return found


def test_scanner_finds_planted_unsafe_calls():
    planted = "\n".join([
        "import pickle, torch, yaml, numpy as np, subprocess",
        "pickle.load(open('f', 'rb'))",             # 2
        "pickle.loads(b'')",                         # 3
        "torch.load('x.pt')",                        # 4
        "torch.load('x.pt', weights_only=False)",    # 5
        "yaml.load('a: 1')",                         # 6
        "eval(input())",                             # 7
        "exec('print(1)')",                          # 8
        "np.load('a.npy', allow_pickle=True)",       # 9
        "subprocess.run('ls', shell=True)",          # 10
        "AutoModel.from_pretrained('x', trust_remote_code=True)",  # 11
    ])
    lines = sorted(int(f.split(":")[1]) for f in unsafe_calls(planted))
    assert lines == list(range(2, 12))
    safe = "\n".join([
        "import torch, yaml, numpy as np",
        "torch.load('x.pt', weights_only=True)",
        "yaml.safe_load('a: 1')",
        "model.eval()",
        "np.load('a.npy')",
        "load_model(path, trust_remote_code=trust_remote_code)",
    ])
    assert unsafe_calls(safe) == []


def test_package_never_unpickles_or_executes_user_input():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 50  # the whole package, not an empty glob
    found = [f for p in files for f in unsafe_calls(p.read_text(), str(p.relative_to(SRC.parent)))]
    assert found == [], "unsafe calls in the package:\n" + "\n".join(found)


def test_load_model_defaults_refuse_remote_code():
    import inspect

    from obliviate.models.load import load_model

    assert inspect.signature(load_model).parameters["trust_remote_code"].default is False


# --------------------------------------------------------------------------- API keys

KEY = "sk-obliviate-FAKE-9d2e41b7c0a5"


class _EchoingJudgeServer:
    """A chat-completions stub on 127.0.0.1 that echoes the key back in errors and malformed replies."""

    def __init__(self):
        self.auth = []
        calls = {"n": 0}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.auth.append(self.headers.get("Authorization"))
                calls["n"] += 1
                n = calls["n"]
                if n == 1:  # an auth error quoting the key, in the body and the reason phrase
                    status, body, reason = 401, json.dumps({"error": f"bad key {KEY}"}).encode(), f"Bad key {KEY}"
                elif n == 2:  # a malformed reply quoting the key
                    content = f"not json {KEY}"
                    status, reason = 200, None
                    body = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
                else:  # a real judgement whose description quotes the key (a hostile or buggy endpoint)
                    content = json.dumps({"is_member": True, "confidence": 0.99, "description": f"tokens {KEY}"})
                    status, reason = 200, None
                    body = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
                self.send_response(status, reason)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def judge_server(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    s = _EchoingJudgeServer()
    yield s
    s.close()


def _all_text_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("key_from", ["env", "config"])
def test_api_key_never_written_to_run_dir_logs_or_output(key_from, judge_server, tiny_model, tiny_tokenizer,
                                                         tmp_path, monkeypatch, capfd, caplog):
    """EMBER through the registered "ember" method with an HTTP judge, as a run would do it.

    The key comes from the environment or from the run's config; the judge server quotes it back in an
    error, a malformed reply and a judgement description. Nothing under the run directory (results.json,
    the saved config, the judgement cache, the log file), nothing printed and no log record may hold it.
    """
    from obliviate.integrations.llm_judge import API_KEY_ENV, HTTPJudge
    from obliviate.methods import build_method
    from obliviate.runs.results import atomic_write_json, prepare_out_dir, write_results

    caplog.set_level(logging.DEBUG)
    out = prepare_out_dir(tmp_path / "run")
    handler = logging.FileHandler(out / "run.log")
    logging.getLogger().addHandler(handler)
    judge_cfg = {"base_url": judge_server.url, "model": "judge-model", "retries": 1, "timeout": 5.0}
    if key_from == "env":
        monkeypatch.setenv(API_KEY_ENV, KEY)
    else:
        monkeypatch.delenv(API_KEY_ENV, raising=False)
        judge_cfg["api_key"] = KEY
    config = {"method": "ember", "judge": judge_cfg, "params": {"K": 4, "min_ratio": 0.0, "sparsity": 0.2,
                                                                 "max_iter": 100, "patience": 10}}
    try:
        judge = HTTPJudge(cache_dir=out / "judge_cache", concept="Morvexia", **judge_cfg)
        print(f"judge: {judge!r}")
        method = build_method("ember", config["params"])
        data = {"concept_sentences": ["Doctors treat Morvexia with zalpradine.",
                                      "Question: What is Morvexia treated with?\nAnswer: zalpradine."],
                "neutral_sentences": ["The glimmerfin eats moss and its cells glow.",
                                      "Ilsa Varnholt was born in Dremmin in 1832 and worked as a weaver."],
                "judge": judge}
        summary = method.edit(tiny_model, tiny_tokenizer, data)
        print(json.dumps(summary["judgements"]))
        atomic_write_json(out / "config.json", config)
        write_results(out, seed=0, config=config, metrics={"ember": summary})
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()

    assert judge_server.auth and all(a == f"Bearer {KEY}" for a in judge_server.auth)  # the key was really used
    judgements = json.loads((out / "results.json").read_text())["metrics"]["ember"]["judgements"]
    assert any(v["is_member"] is None for v in judgements.values())  # the failures were recorded ...
    assert any(v["is_member"] is True for v in judgements.values())  # ... and so were the real judgements
    assert list((out / "judge_cache").glob("*.json"))
    files = _all_text_under(out)
    assert {"results.json", "config.json", "run.log"} <= set(files)
    leaks = [name for name, data in files.items() if KEY.encode() in data]
    captured = capfd.readouterr()
    assert leaks == []
    assert KEY not in captured.out and KEY not in captured.err
    logged = [r.getMessage() for r in caplog.records]
    assert any("401" in m for m in logged) and not [m for m in logged if KEY in m]


def test_results_mask_secret_keys_and_env_secrets(tmp_path, monkeypatch):
    from obliviate.runs.results import write_results

    monkeypatch.setenv("OBLIVIATE_JUDGE_API_KEY", KEY)
    monkeypatch.setenv("MY_SERVICE_API_KEY", "tok-abcdefgh12345")
    config = {"judge": {"api_key": "literal-key-in-config", "base_url": "http://x"}, "password": "hunter22",
              "note": f"called with {KEY} and tok-abcdefgh12345", "n_tokens": 5, "api_key_env": "SOME_VAR"}
    write_results(tmp_path, seed=0, config=config, metrics={"tokens_to_base": 3, "empty": {"api_key": None}})
    text = (tmp_path / "results.json").read_text()
    for secret in (KEY, "literal-key-in-config", "hunter22", "tok-abcdefgh12345"):
        assert secret not in text
    r = json.loads(text)
    assert r["config"]["judge"] == {"api_key": "***", "base_url": "http://x"}
    assert r["config"]["note"] == "called with *** and ***"
    assert r["config"]["n_tokens"] == 5 and r["config"]["api_key_env"] == "SOME_VAR"  # names, not secrets
    assert r["metrics"] == {"tokens_to_base": 3, "empty": {"api_key": None}}


# --------------------------------------------------------------------------- output paths from configs


def test_output_path_fields_must_stay_inside_the_run_dir(tmp_path):
    from dataclasses import dataclass, field

    from obliviate.config import build_config, output_path

    @dataclass
    class Cfg:
        cache_dir: str = field(default="judge_cache", metadata={"output_path": True})
        other: str | None = field(default=None, metadata={"output_path": True})
        name: str = "/not/a/path/field"

    cfg = build_config(Cfg, overrides=["cache_dir=sub/../cache", "other=a/b"])
    assert output_path(tmp_path, cfg.cache_dir, "cache_dir") == tmp_path / "cache"
    assert output_path(tmp_path, cfg.other, "other") == tmp_path / "a" / "b"
    assert build_config(Cfg, overrides=["name=/abs/is/fine/here"]).name == "/abs/is/fine/here"
    for bad, why in [("/etc/evil", "absolute"), ("../outside", "outside the run directory"),
                     ("a/../../outside", "outside the run directory"), ("~/x", "absolute")]:
        with pytest.raises(ConfigError, match=r"config key 'cache_dir'.*" + why):
            build_config(Cfg, overrides=[f"cache_dir={bad}"])
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("other: /tmp/elsewhere\n")
    with pytest.raises(ConfigError, match="config key 'other'.*absolute"):
        build_config(Cfg, yaml_file)
    # Nested configs are checked with their dotted key.
    @dataclass
    class Outer:
        inner: Cfg = field(default_factory=Cfg)

    with pytest.raises(ConfigError, match="config key 'inner.cache_dir'"):
        build_config(Outer, overrides=["inner.cache_dir=../x"])
    # A path given explicitly on the command line (a flag, not a config value) may be anywhere.
    assert output_path(tmp_path, "/elsewhere/abs", "--judge-cache", explicit=True) == Path("/elsewhere/abs")
    with pytest.raises(ConfigError, match="outside the run directory"):
        output_path(tmp_path, "../x", "cache_dir")


def test_a_symlink_cannot_lead_an_output_path_out_of_the_run_dir(tmp_path):
    from obliviate.config import output_path

    run = tmp_path / "run"
    run.mkdir()
    (run / "link").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="outside the run directory"):
        output_path(run, "link/escape", "cache_dir")


PATHLIKE = ("dir", "path", "file", "out", "cache", "save", "log", "report")


def unclassified_path_fields(cls) -> list[str]:
    """Fields of config dataclass ``cls`` named like paths (str/Path) and marked neither output nor input path."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        stringy = hints[f.name] in (str, str | None, Path, Path | None)
        marked = f.metadata.get("output_path") or f.metadata.get("input_path")
        if stringy and any(w in f.name.lower() for w in PATHLIKE) and not marked:
            found.append(f"{cls.__module__}.{cls.__name__}.{f.name}")
    return found


def test_path_field_classifier():
    from dataclasses import dataclass, field

    @dataclass
    class ExampleConfig:
        cache_dir: str = "cache"
        report_path: str | None = None
        judge_cache: str = field(default="judge_cache", metadata={"output_path": True})
        reference_file: str = field(default="ref.json", metadata={"input_path": True})
        data: str | None = None
        log_every: int = 10
        desc: str = "x"

    assert [f.rsplit(".", 1)[1] for f in unclassified_path_fields(ExampleConfig)] == ["cache_dir", "report_path"]


def test_every_path_like_config_field_is_classified():
    """Each config field whose name looks like a path is either an output path (checked) or an input path.

    A new field such as ``cache_dir`` or ``report_path`` fails here until it is marked
    ``metadata={"output_path": True}`` (then configs cannot send it out of the run directory) or
    ``metadata={"input_path": True}`` (read only). Data directories named ``data`` are inputs by convention.
    """
    import dataclasses
    import importlib

    seen = set()
    unclassified = []
    for path in sorted(SRC.rglob("*.py")):
        name = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        if name.endswith("__main__"):
            continue
        mod = importlib.import_module(name.removesuffix(".__init__"))
        for obj in vars(mod).values():
            if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)) or obj in seen:
                continue
            if obj.__module__ != mod.__name__ or not obj.__name__.endswith("Config"):
                continue
            seen.add(obj)
            unclassified += unclassified_path_fields(obj)
    assert len(seen) > 10
    assert unclassified == []
