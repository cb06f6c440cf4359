"""``obliviate reproduce NAME --render-only DIR``: a recipe's report is a pure function of its results.json.

For every recipe that splits run / claims / report (``recipes/<name>/``), the committed
``docs/results/<name>/report.md`` is re-rendered from the committed ``results.json`` alone, in a
copy, and must come out byte for byte; nothing is trained (the test takes well under a second).
"""

import json
import shutil
from pathlib import Path

import pytest

from obliviate.cli import main
from obliviate.recipes import available, get_recipe, render_only

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
SPLIT = ["atwu"]
"""Recipes whose claims and report are pure functions of results.json."""


@pytest.mark.parametrize("name", SPLIT)
def test_render_only_reproduces_the_committed_report(name, tmp_path):
    shutil.copy(DOCS / name / "results.json", tmp_path / "results.json")
    render_only(name, tmp_path)
    assert (tmp_path / "report.md").read_bytes() == (DOCS / name / "report.md").read_bytes()
    for png in (DOCS / name).glob("*.png"):  # and every plot the report shows
        assert (tmp_path / png.name).is_file(), png.name


def test_render_only_through_the_cli_and_its_errors(tmp_path, capsys):
    shutil.copy(DOCS / "atwu" / "results.json", tmp_path / "results.json")
    assert main(["reproduce", "atwu", "--render-only", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").read_bytes() == (DOCS / "atwu" / "report.md").read_bytes()
    assert main(["reproduce", "atwu", "--render-only", str(tmp_path / "nowhere")]) == 2
    assert "no results.json there" in capsys.readouterr().err
    half = tmp_path / "half"
    half.mkdir()
    (half / "results.json").write_text(json.dumps({"status": "invalid", "error": "killed"}))
    assert main(["reproduce", "atwu", "--render-only", str(half)]) == 2
    assert "not 'complete'" in capsys.readouterr().err and not (half / "report.md").exists()
    others = [n for n in available() if n not in SPLIT]
    assert others and main(["reproduce", others[0], "--render-only", str(tmp_path)]) == 2
    assert "cannot re-render a report from results.json yet (recipes that can: atwu)" in capsys.readouterr().err
    assert main(["reproduce", "atwu"]) == 2  # neither --out nor --render-only
    assert "--out DIR is required" in capsys.readouterr().err


def test_the_report_a_run_writes_is_the_one_render_only_writes(tmp_path, monkeypatch):
    """The run renders from the JSON-clean results it then writes, so a re-render changes nothing."""
    import obliviate.recipes.atwu.run as recipe_mod
    from obliviate.config import from_dict

    def fake_world(cfg, methods, out, progress):
        m = {n: {"uq": 50.0 + i, "forget_qa_acc": 0.1, "rd": 0.05, "fq": float("nan")} for i, n in enumerate(methods)}
        m["atwu"]["token_auroc"] = 0.8
        m["base"] = {"forget_qa_acc": 1.0}
        m["token_baselines"] = {"uniform": {"token_auroc": 0.5}, "rarity": {"token_auroc": 0.9}}
        m["token_labels"] = {"n_specific": 2, "n_structural": 3}
        return m, {}

    monkeypatch.setattr(recipe_mod, "run_world", fake_world)
    get_recipe("atwu")
    cfg = from_dict(recipe_mod.AtwuRecipeConfig, {"quick": True, "quick_methods": ["atwu", "npo"]})
    recipe_mod.run(cfg, tmp_path / "run", progress=False)
    first = (tmp_path / "run" / "report.md").read_bytes()
    render_only("atwu", tmp_path / "run")
    assert (tmp_path / "run" / "report.md").read_bytes() == first
