"""docs/methods.md's generated tables match the registry, and a new method is one file.

The newcomer test copies ``examples/new-method/hinge_ascent.py`` (40 lines) into a directory on the
``obliviate.methods`` package path, as a new file in ``src/obliviate/methods/`` would be, and touches
nothing else. The method must then be listed by ``obliviate methods``, keep the method contract, get
its tiny preset (and the default paper preset it does not name), appear in the generated docs, and
run end to end with ``obliviate unlearn --method hinge_ascent`` (2 steps on a tiny model).
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

import obliviate.methods
from obliviate.cli.main import main
from obliviate.methods import DEFAULT_PRESETS, METHODS, build_method, method_defaults, method_names
from obliviate.unlearning.docs import current_block, render
from obliviate.unlearning.contract import Method

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "new-method" / "hinge_ascent.py"
sys.path.insert(0, str(ROOT / "tests"))
from _cli_errors import SMALL_WORLD  # noqa: E402


def test_generated_tables_are_current():
    text = (ROOT / "docs" / "methods.md").read_text()
    start, end = current_block(text)
    assert text[start:end] == render(), "docs/methods.md is stale: run `make docs`"


def test_every_method_declares_its_objective():
    for name in method_names():
        assert METHODS[name].equation, f"method {name!r} registers no equation"


@pytest.fixture
def newcomer(tmp_path, monkeypatch):
    extra = tmp_path / "methods_dir"
    extra.mkdir()
    shutil.copy(EXAMPLE, extra / EXAMPLE.name)
    assert "hinge_ascent" not in METHODS  # nothing registers it before the file is on the path
    monkeypatch.setattr(obliviate.methods, "__path__", [*obliviate.methods.__path__, str(extra)])
    yield "hinge_ascent"
    METHODS.remove("hinge_ascent")
    sys.modules.pop("obliviate.methods.hinge_ascent", None)


@pytest.fixture
def tiny_model_dir(tmp_path):
    from obliviate.models import save_model, tiny_llama, train_tokenizer
    from obliviate.world import WorldConfig, generate_world

    w = generate_world(WorldConfig(seed=0, n_forget=3, n_holdout=1, n_retain=3, n_general=3, n_concept=2, n_toxic=4))
    tok = train_tokenizer([d["text"] for d in w.documents()], vocab_size=400)
    d = tmp_path / "model"
    save_model(tiny_llama(len(tok), n_layer=2, d_model=32, n_head=2), d)
    tok.save_pretrained(str(d))
    return d


def test_a_new_method_is_one_file(newcomer, tiny_model_dir, tmp_path, capsys):
    assert len(EXAMPLE.read_text().splitlines()) <= 60
    assert main(["methods"]) == 0
    assert newcomer in capsys.readouterr().out.split()
    cls = METHODS[newcomer]
    assert issubclass(cls, Method) and cls.kind == "train"
    assert isinstance(build_method(newcomer), Method)
    assert method_defaults(newcomer, "tiny")["lr"] == 3e-4 and method_defaults(newcomer, "tiny")["steps"] == 20
    assert method_defaults(newcomer, "paper") == {**DEFAULT_PRESETS["paper"], "params": {}}
    assert f"| `{newcomer}` | relu(m − NLL(forget answers))" in render()
    out = tmp_path / "run"
    rc = main(["unlearn", "--out", str(out), "--model", str(tiny_model_dir), "--method", newcomer, "--no-progress",
               *SMALL_WORLD, "unlearn.train.steps=2", "unlearn.params.margin=20"])
    assert rc == 0, capsys.readouterr().err
    logged = [json.loads(line) for line in (out / "train" / "metrics.jsonl").read_text().splitlines()]
    assert {"forget", "retain"} <= set(logged[-1]) and logged[-1]["forget"] > 0
    assert json.loads((out / "results.json").read_text())["config"]["unlearn"]["method"] == newcomer
