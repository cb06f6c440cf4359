"""``obliviate reproduce NAME --render-only DIR``: a recipe's report is a pure function of its results.json.

Every recipe splits run / claims / report (``recipes/<name>/``). Each committed
``docs/results/<dir>/report.md`` is re-rendered from the committed ``results.json`` alone, in a
copy, and must come out byte for byte; nothing is trained (a few seconds in all, for the plots).
"""

import json
import shutil
import warnings
from pathlib import Path

import pytest

from obliviate.cli.main import main
from obliviate.papers import available, get_recipe, render_only

DOCS = Path(__file__).resolve().parents[2] / "docs" / "results"
COMMITTED = sorted(p.name for p in DOCS.iterdir() if (p / "results.json").is_file())


def recipe_of(directory: str) -> str:
    """The recipe whose run a committed results directory holds (its name, or its name and a suffix)."""
    return max((n for n in available() if directory == n or directory.startswith(n + "-")), key=len)


def test_every_recipe_has_committed_results():
    assert {recipe_of(d) for d in COMMITTED} == set(available())


@pytest.mark.parametrize("directory", COMMITTED)
def test_render_only_reproduces_the_committed_report(directory, tmp_path):
    shutil.copy(DOCS / directory / "results.json", tmp_path / "results.json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        render_only(recipe_of(directory), tmp_path)
    assert (tmp_path / "report.md").read_bytes() == (DOCS / directory / "report.md").read_bytes()
    for png in (DOCS / directory).glob("*.png"):  # every plot the report shows is drawn, or the render says why not
        assert (tmp_path / png.name).is_file() or any(png.name in str(w.message) for w in caught), png.name


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
    # another recipe's results.json: one line, and nothing in the directory is touched
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()}
    assert main(["reproduce", "ember", "--render-only", str(tmp_path)]) == 2
    assert "which the ember report needs" in capsys.readouterr().err
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir() if f.is_file()} == before
    assert not any(f.name.startswith(".render-") for f in tmp_path.iterdir())
    assert main(["reproduce", "atwu"]) == 2  # neither --out nor --render-only
    assert "--out DIR is required" in capsys.readouterr().err


def test_the_report_a_run_writes_is_the_one_render_only_writes(tmp_path, monkeypatch):
    """The run renders from the JSON-clean results it then writes, so a re-render changes nothing."""
    import obliviate.papers.atwu.run as recipe_mod
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
