"""The whole path on a user's own model and data: finetune, unlearn (4 methods), eval, attack.

Small random-init models of real architectures, each with its own tokenizer saved beside it; a QA forget
file (JSON Lines, fields ``prompt`` / ``response``), a retain QA file (CSV, ``q`` / ``a``) and a retain
document file (plain text). The whole path of each architecture (about 10-25 s each) runs with ``make test-all``;
the checks of documents, refusals and names below run in the default suite.
"""

from __future__ import annotations

import json

import pytest
import torch
from huggingface_hub import ModelCard

from obliviate.cli.main import main
from obliviate.models.load import load_model

ARCHS = [pytest.param(a, marks=pytest.mark.slow) for a in ("qwen2", "gpt2", "llama", "gemma2", "gptneox", "mistral")]
"""Every architecture's whole path runs under ``make test-all``; the default suite runs the same path on Qwen2 as the
README gives it (tests/tasks/test_readme_example.py: finetune, unlearn with NPO, eval, attack with its verdict)."""


def _files(user_files) -> list[str]:
    return ["--forget", str(user_files["forget"]), "--retain", str(user_files["retain_qa"]),
            "--retain", str(user_files["retain_docs"]), "--utility", str(user_files["utility"]),
            "--relearn", str(user_files["relearn"]), "--no-progress"]


def _metrics(out) -> dict:
    return json.loads((out / "results.json").read_text())["metrics"]


@pytest.fixture(scope="module")
def finetuned(user_models, user_files, tmp_path_factory):
    """``{arch: fine-tuned model directory}``, fine-tuned on first use with finetune's own defaults."""
    root = tmp_path_factory.mktemp("finetuned")

    class Finetuned(dict):
        def __missing__(self, arch):
            out = root / arch
            assert main(["finetune", "--model", str(user_models[arch]), "--out", str(out), *_files(user_files)]) == 0
            self[arch] = out
            return out

    return Finetuned()


def _whole_path(arch, finetuned, user_files, tmp_path, methods):
    ft = finetuned[arch]
    m = _metrics(ft)["finetuned"]
    assert m["forget_qa_em"] >= 0.8 and m["retain_qa_em"] >= 0.8, m  # finetune taught the QA
    for key in ("forget_score", "retain_score", "utility_score", "retain_text_loss", "forget_qa_prob"):
        assert key in m
    model_dir = ft / "model"
    card = ModelCard.load(model_dir / "README.md")  # a model card the hub library parses
    assert card.data.base_model and "unlearning" in card.data.tags
    before = {k: v.clone() for k, v in load_model(str(model_dir)).state_dict().items()}
    results = {}
    for method in methods:
        out = tmp_path / method
        assert main(["unlearn", "--model", str(model_dir), "--method", method, "--out", str(out),
                     *_files(user_files)]) == 0
        res = json.loads((out / "results.json").read_text())
        assert res["status"] == "complete" and res["task"]["name"] == "files"
        results[method] = res["metrics"]
        assert set(res["metrics"]) == {"base", method}
    after = load_model(str(model_dir)).state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the input model is never touched
    unlearned = tmp_path / methods[0] / "model"
    assert main(["eval", "--model", str(unlearned), "--out", str(tmp_path / "eval"), *_files(user_files)]) == 0
    assert _metrics(tmp_path / "eval")["model"]["forget_qa_em"] == pytest.approx(
        results[methods[0]][methods[0]]["forget_qa_em"])  # eval agrees with what unlearn measured
    out = tmp_path / "attack"
    assert main(["attack", "--model", str(unlearned), "--base", str(model_dir), "--out", str(out),
                 *_files(user_files), "attacks.relearn.steps=6", "attacks.relearn.eval_every=3",
                 "attacks.lr_grid=[3e-4]", "attacks.lora=false"]) == 0
    att = _metrics(out)
    assert {"relearn", "relearn_disjoint"} <= set(att["attacks_run"])
    assert [c[0] for c in att["relearn_curve"]] == [0, 3, 6]  # the recovery curve on the relearning texts
    assert att["relearn_base_acc"] >= 0.8  # the base model's forget score is the target
    assert (out / "relearn_curve.png").exists()
    return results


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.heavy(11)
def test_finetune_unlearn_eval_attack(arch, finetuned, user_files, tmp_path):
    results = _whole_path(arch, finetuned, user_files, tmp_path, ["npo", "graddiff", "rmu", "simnpo"])
    for method in ("npo", "graddiff"):  # each method's own defaults
        base, after = results[method]["base"], results[method][method]
        assert after["forget_qa_em"] <= 0.5 * base["forget_qa_em"], (method, after)
        assert after["retain_qa_em"] >= 0.6 * base["retain_qa_em"], (method, after)


def test_rmu_on_documents_only(user_models, user_files, tmp_path):
    """RMU unlearns forget *documents* against retain documents (the WMDP setting)."""
    docs = tmp_path / "forget_docs.txt"
    docs.write_text("\n".join(f"Document {i}: " + user_files["retain_docs"].read_text().splitlines()[i]
                              for i in range(8)) + "\n")
    out = tmp_path / "rmu"
    assert main(["unlearn", "--model", str(user_models["qwen2"]), "--method", "rmu", "--out", str(out),
                 "--forget", str(docs), "--retain", str(user_files["retain_docs"]), "--no-progress",
                 "unlearn.train.steps=5"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["data"]["forget"]["docs"] == 8 and res["data"]["forget"]["qa"] == 0
    assert "forget_text_loss" in res["metrics"]["rmu"]


def test_idkdpo_on_documents_is_refused(user_models, user_files, tmp_path, capsys):
    docs = tmp_path / "forget_docs.txt"  # documents, none of them among the retain documents
    docs.write_text("\n".join(f"Document {i}: " + line for i, line in
                              enumerate(user_files["retain_docs"].read_text().splitlines()[:8])) + "\n")
    rc = main(["unlearn", "--model", str(user_models["qwen2"]), "--method", "IdkDPO", "--out", str(tmp_path / "o"),
               "--forget", str(docs), "--retain", str(user_files["retain_docs"]), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "idkdpo" in err and "QA pairs" in err
    assert not (tmp_path / "o" / "results.json").exists()


def test_out_inside_the_input_model_is_refused(user_models, user_files, capsys):
    model = user_models["qwen2"]
    rc = main(["unlearn", "--model", str(model), "--method", "npo", "--out", str(model / "run"),
               "--forget", str(user_files["forget"]), "--retain", str(user_files["retain_qa"])])
    assert rc == 2 and "overlaps" in capsys.readouterr().err
    assert not (model / "run").exists()


def test_unknown_method_suggests_the_closest(user_models, user_files, capsys):
    rc = main(["unlearn", "--model", str(user_models["qwen2"]), "--method", "npp", "--out", "/tmp/never",
               "--forget", str(user_files["forget"]), "--retain", str(user_files["retain_qa"])])
    assert rc == 2 and "did you mean 'npo'" in capsys.readouterr().err
