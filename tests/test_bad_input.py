"""Bad input at the command line: each gets one line naming it and exit status 2, before any results.json.

docs/bad-input.md lists every bad input tried and the test that checks it;
``test_bad_input_table_names_existing_tests`` keeps the table and the tests in step.
"""

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from _cli_errors import SMALL_WORLD, one_error
from obliviate.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
WORLD_ONLY = [w.split(".", 1)[1] for w in SMALL_WORLD]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """``model``: a tiny model with a 400-token tokenizer; ``small_vocab``: the same tokenizer with a model
    that embeds only 300 tokens."""
    from obliviate.models import save_model, tiny_llama, train_tokenizer
    from obliviate.world import WorldConfig, generate_world

    root = tmp_path_factory.mktemp("bad_input")
    w = generate_world(WorldConfig(seed=0, n_forget=3, n_holdout=1, n_retain=3, n_general=3, n_concept=2, n_toxic=4))
    tok = train_tokenizer([d["text"] for d in w.documents()], vocab_size=400)
    assert len(tok) == 400
    save_model(tiny_llama(len(tok), n_layer=2, d_model=32, n_head=2), root / "model")
    tok.save_pretrained(str(root / "model"))
    save_model(tiny_llama(300, n_layer=2, d_model=32, n_head=2), root / "small_vocab")
    tok.save_pretrained(str(root / "small_vocab"))
    return root


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# --------------------------------------------------------------------------- model directories


def test_corrupt_or_truncated_safetensors(dirs, tmp_path, capsys):
    garbage = _copy(dirs / "model", tmp_path / "garbage")
    (garbage / "model.safetensors").write_bytes(b"not a safetensors file" * 4)
    truncated = _copy(dirs / "model", tmp_path / "truncated")
    data = (dirs / "model" / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    for d in (garbage, truncated):
        out = tmp_path / f"out_{d.name}"
        assert main(["eval", "--out", str(out), "--model", str(d), *WORLD_ONLY]) == 2
        line = one_error(capsys)
        assert f"cannot load model '{d}': corrupt safetensors weights" in line
        assert not (out / "results.json").exists()


def test_weights_that_do_not_match_config_json(dirs, tmp_path, capsys):
    d = _copy(dirs / "model", tmp_path / "resized")
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(hidden_size=64, intermediate_size=128)
    (d / "config.json").write_text(json.dumps(cfg))
    assert main(["eval", "--out", str(tmp_path / "o"), "--model", str(d), *WORLD_ONLY]) == 2
    assert f"cannot load model '{d}': its weights do not match its config.json" in one_error(capsys)


def test_config_json_without_model_type(dirs, tmp_path, capsys):
    d = _copy(dirs / "model", tmp_path / "typeless")
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("model_type")
    (d / "config.json").write_text(json.dumps(cfg))
    assert main(["unlearn", "--out", str(tmp_path / "o"), "--base", str(d), "--method", "npo", *SMALL_WORLD]) == 2
    assert "no 'model_type' key" in one_error(capsys)


# --------------------------------------------------------------------------- tokenizer / model mismatch


@pytest.mark.parametrize("command", ["eval", "eval --data", "unlearn", "attack", "attack --base", "probe-directions"])
def test_tokenizer_larger_than_model_vocab_is_refused_at_load_time(command, dirs, tmp_path, capsys):
    small, good = str(dirs / "small_vocab"), str(dirs / "model")
    out = ["--out", str(tmp_path / "o")]
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"question": "q?", "answer": "a"}) + "\n")
    args = {
        "eval": ["eval", *out, "--model", small, *WORLD_ONLY],
        "eval --data": ["eval", *out, "--model", small, "--data", str(data), "--kind", "qa"],
        "unlearn": ["unlearn", *out, "--base", small, "--method", "npo", *SMALL_WORLD],
        "attack": ["attack", *out, "--model", small, *SMALL_WORLD],
        "attack --base": ["attack", *out, "--model", good, "--base", small, *SMALL_WORLD],
        "probe-directions": ["probe-directions", "--model", small, *WORLD_ONLY],
    }[command]
    assert main(args) == 2
    line = one_error(capsys)
    assert f"for '{small}' has 400 tokens but the model embeds only 300" in line
    assert not (tmp_path / "o" / "results.json").exists()


def test_tokenizer_given_separately_is_checked_against_the_model(dirs, tmp_path, capsys):
    assert main(["eval", "--out", str(tmp_path / "o"), "--model", str(dirs / "small_vocab"),
                 "--tokenizer", str(dirs / "model"), *WORLD_ONLY]) == 2
    assert f"tokenizer '{dirs / 'model'}' for '{dirs / 'small_vocab'}' has 400 tokens" in one_error(capsys)


def test_corrupt_or_missing_tokenizer_files(dirs, tmp_path, capsys):
    bad = _copy(dirs / "model", tmp_path / "badtok")
    (bad / "tokenizer.json").write_text("{not json")
    assert main(["eval", "--out", str(tmp_path / "o1"), "--model", str(bad), *WORLD_ONLY]) == 2
    assert f"cannot load tokenizer from '{bad}'" in one_error(capsys)
    none = _copy(dirs / "model", tmp_path / "notok")
    (none / "tokenizer.json").unlink()
    (none / "tokenizer_config.json").unlink()
    assert main(["eval", "--out", str(tmp_path / "o2"), "--model", str(none), *WORLD_ONLY]) == 2
    assert f"tokenizer directory '{none}' has no tokenizer.json or tokenizer_config.json" in one_error(capsys)


# --------------------------------------------------------------------------- configs


def test_yaml_whose_top_level_is_not_a_mapping(tmp_path, capsys):
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    assert main(["world", "--out", str(tmp_path / "o"), "--config", str(f)]) == 2
    assert f"config file {f} must contain a mapping at top level" in one_error(capsys)


def test_override_without_equals_sign(tmp_path, capsys):
    assert main(["world", "--out", str(tmp_path / "o"), "n_forget"]) == 2
    assert "override 'n_forget' is not of the form key=value" in one_error(capsys)


@pytest.mark.parametrize("override,message", [
    ("unlearn.params.bogus=1", "unknown config key 'unlearn.params.bogus' (known: alpha, beta, gamma, retain)"),
    ("unlearn.params.beta=high", "config key 'unlearn.params.beta': expected a number, got 'high'"),
    ("unlearn.params=3", "config key 'unlearn.params': expected a mapping, got 3"),
    ("unlearn.batch_size=0", "config key 'unlearn.batch_size': must be >= 1, got 0"),
    ("unlearn.train.trainable=[model.layers.0.*]",
     "config key 'unlearn.train.trainable' (['model.layers.0.*']) cannot be set for unlearning"),
])
def test_bad_unlearning_config(override, message, dirs, tmp_path, capsys):
    out = tmp_path / "o"
    rc = main(["unlearn", "--out", str(out), "--base", str(dirs / "model"), "--method", "npo", "--no-progress",
               "unlearn.train.steps=1", *SMALL_WORLD, override])
    assert rc == 2 and message in one_error(capsys)
    assert not (out / "results.json").exists()


# --------------------------------------------------------------------------- layers, methods, recipes


def test_bad_probe_layers(dirs, tmp_path, capsys):
    assert main(["probe-directions", "--model", str(dirs / "model"), "--layers", "a,b", *WORLD_ONLY]) == 2
    assert "--layers 'a,b': expected comma-separated layer indices" in one_error(capsys)
    assert main(["probe-directions", "--model", str(dirs / "model"), "--layers", "9", *WORLD_ONLY]) == 2
    assert "layer 9 out of range for a 2-layer model (valid: 0..1)" in one_error(capsys)


def test_attack_probe_layer_out_of_range_fails_before_the_attacks(dirs, tmp_path, capsys, monkeypatch):
    import obliviate.attacks.relearn as attacks

    def no_relearning(*a, **kw):
        raise AssertionError("the relearning attack ran before the bad layer was reported")

    monkeypatch.setattr(attacks, "relearn_attack", no_relearning)
    out = tmp_path / "o"
    assert main(["attack", "--out", str(out), "--model", str(dirs / "model"), *SMALL_WORLD,
                 "attacks.probe.layers=[0,9]"]) == 2
    assert "layer 9 out of range for a 2-layer model (valid: 0..1)" in one_error(capsys)
    assert not (out / "results.json").exists()


def test_unknown_recipe(tmp_path, capsys):
    assert main(["reproduce", "no-such-paper", "--out", str(tmp_path / "o")]) == 2
    err = one_error(capsys)
    assert "unknown recipe 'no-such-paper'" in err and "; known: atwu, " in err


# --------------------------------------------------------------------------- data files


def test_missing_or_malformed_data_file(dirs, tmp_path, capsys):
    model = str(dirs / "model")
    missing = tmp_path / "none.jsonl"
    assert main(["eval", "--out", str(tmp_path / "o"), "--model", model, "--data", str(missing), "--kind", "qa"]) == 2
    assert f"file not found: {missing}" in one_error(capsys)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q?", "answer": "a"}\n{oops\n')
    assert main(["eval", "--out", str(tmp_path / "o"), "--model", model, "--data", str(bad), "--kind", "qa"]) == 2
    assert "bad.jsonl line 2: invalid JSON" in one_error(capsys)
    assert not (tmp_path / "o" / "results.json").exists()


# --------------------------------------------------------------------------- the table in docs/bad-input.md


TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def check_table(text: str) -> tuple[int, list[str], list[str]]:
    """(number of rows, rows naming no test, named tests that are not defined) of a Markdown table."""
    rows = [l for l in text.splitlines() if l.startswith("|") and not re.match(r"^\|[\s:|-]+\|$", l)]
    rows = [r for r in rows if not r.startswith("| Input")]
    defined: dict[str, set] = {}
    untested, missing = [], []
    for row in rows:
        refs = TEST_REF.findall(row)
        if not refs:
            untested.append(row)
        for path, name in refs:
            if path not in defined:
                f = ROOT / path
                tree = ast.parse(f.read_text()) if f.is_file() else ast.Module(body=[], type_ignores=[])
                defined[path] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            if name not in defined[path]:
                missing.append(f"{path}::{name}")
    return len(rows), untested, missing


def test_bad_input_table_names_existing_tests():
    """Every row of docs/bad-input.md names at least one test, and every named test exists."""
    n, untested, missing = check_table((ROOT / "docs" / "bad-input.md").read_text())
    assert n >= 40
    assert untested == []
    assert missing == []


def test_the_table_checker_catches_untested_rows_and_missing_tests():
    doc = ("| Input | Tried | Error | Test |\n|---|:--|---|---|\n"
           "| config | a | b | `tests/test_bad_input.py::test_override_without_equals_sign` |\n"
           "| config | c | d | `tests/test_bad_input.py::test_that_was_renamed`, `tests/nowhere.py::test_x` |\n"
           "| config | e | f | none yet |\n")
    n, untested, missing = check_table(doc)
    assert n == 3
    assert untested == ["| config | e | f | none yet |"]
    assert missing == ["tests/test_bad_input.py::test_that_was_renamed", "tests/nowhere.py::test_x"]
