"""The comparison pipeline end to end on a very small world (results contract, resume, report)."""

import json
from pathlib import Path

import pytest

from obliviate.cli.main import main
from obliviate.models.load import load_model
from obliviate.runs.report import markdown_to_html

SMALL = ["pretrain.world.n_forget=3", "pretrain.world.n_holdout=1", "pretrain.world.n_retain=3",
         "pretrain.world.n_general=3", "pretrain.world.n_concept=2", "pretrain.world.n_toxic=4",
         "pretrain.model.size=nano", "pretrain.model.vocab_size=400", "pretrain.batch_size=4",
         "pretrain.train.steps=20", "pretrain.train.warmup_steps=2",
         "methods=[graddiff,rmu]", "runs.graddiff.steps=3", "runs.rmu.steps=3",
         "attacks.relearn.steps=4", "attacks.relearn.eval_every=2"]


def test_compare_results_contract_and_resume(tmp_path, capsys, monkeypatch):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--seed", "2", "--no-progress", *SMALL]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete" and res["seed"] == 2
    m = res["metrics"]
    assert {"base", "oracle", "graddiff", "rmu"} <= set(m)
    for name in ("graddiff", "rmu"):
        for key in ("forget_qa_acc", "retain_qa_acc", "s_unlearning", "relearn_forget_qa_acc", "forget_quality",
                    "probe_acc", "format_qa_paraphrase"):
            assert key in m[name], (name, key)
        assert 0.0 <= m[name]["s_unlearning"] <= 1.0
    assert "forget_qa_acc" in m["base"] and "retain_qa_acc" in m["base"]
    # issue 15's results contract: both controls, and the robustness numbers in every row
    assert {"positive_control", "oracle"} <= set(m)
    for name, row in m.items():
        for key in ("relearn_disjoint_acc", "relearn_disjoint_start_acc", "recovery_cost_tokens", "mia_auc_loss",
                    "mia_auc_zlib", "mia_auc_min_k", "mia_auc_min_k_plus_plus"):
            assert key in row, (name, key)
    assert set(res["robustness"]["verdicts"]) == {"graddiff", "rmu"}
    assert "## Robustness" in (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "relearning" in html
    assert (out / "methods" / "rmu" / "result.json").exists()
    _check_models(out, res)

    # A second run with the same config reuses the finished methods and gives the same metrics.
    import obliviate.recipes.compare.run as compare

    def no_training(*a, **k):
        raise AssertionError("a finished method was trained again")

    monkeypatch.setattr(compare, "unlearn", no_training)
    (out / "results.json").unlink()
    assert main(["demo", "--out", str(out), "--seed", "2", "--no-progress", *SMALL]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["metrics"] == m
    assert again["model_dirs"] == res["model_dirs"]  # a resumed method keeps its saved model
    _check_models(out, again)


def _check_models(out: Path, res: dict) -> None:
    """The run directory holds every model it reports on, and each loads."""
    dirs = res["model_dirs"]
    assert set(dirs) == set(res["metrics"])
    refs = ("base", "oracle", "positive_control")
    expected = {**{n: out / "models" / n for n in refs},
                **{n: out / "methods" / n / "model" for n in dirs if n not in refs}}
    for name, d in dirs.items():
        assert Path(d) == expected[name], name
        assert (Path(d) / "config.json").exists() and (Path(d) / "model.safetensors").exists(), name
        model = load_model(d)
        assert sum(p.numel() for p in model.parameters()) > 0


def test_markdown_to_html_tables_lists_and_embedded_images(tmp_path):
    import base64

    png = tmp_path / "p.png"
    png.write_bytes(b"\x89PNG fake")
    md = "# T\n\n| a | b |\n|---|---|\n| 1 | **x** |\n\n- one\n- two\n\n![p](p.png)\n"
    html = markdown_to_html(md, tmp_path)
    assert "<h1>T</h1>" in html and "<td>1</td><td><b>x</b></td>" in html
    assert "<li>one</li><li>two</li>" in html
    assert base64.b64encode(b"\x89PNG fake").decode() in html
