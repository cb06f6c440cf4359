"""Presets that scale with the model (#29): the unlearning lr follows the fine-tuning run's."""

import json
import shutil

import pytest

from obliviate.cli.main import main
from obliviate.pipelines.unlearn import finetune_lr_factor
from obliviate.methods import method_defaults
from obliviate.runs.card import write_model_card
from obliviate.train.finetune import PRESETS as FINETUNE_PRESETS


def _card(d, method="finetune", **settings):
    d.mkdir(parents=True, exist_ok=True)
    write_model_card(d, base_model="b", task="files", method=method, settings=settings, metrics={})
    return d


def test_finetune_lr_factor_reads_the_fine_tuning_card(tmp_path):
    tiny = FINETUNE_PRESETS["tiny"]["lr"]
    f, why = finetune_lr_factor(_card(tmp_path / "a", lr=tiny / 3, preset="tiny"))
    assert f == pytest.approx(1 / 3) and "fine-tuned at lr 0.001" in why
    assert finetune_lr_factor(_card(tmp_path / "b", lr=tiny, preset="tiny")) == (1.0, None)  # the preset's own lr
    paper = FINETUNE_PRESETS["paper"]["lr"]
    assert finetune_lr_factor(_card(tmp_path / "c", lr=4 * paper, preset="paper"))[0] == pytest.approx(4.0)
    # an unlearned model's card, no card, a card without a usable lr: the preset as it is
    assert finetune_lr_factor(_card(tmp_path / "d", method="npo", lr=1.0, preset="tiny")) == (1.0, None)
    assert finetune_lr_factor(tmp_path / "none") == (1.0, None)
    assert finetune_lr_factor(_card(tmp_path / "e", lr="fast", preset="tiny")) == (1.0, None)
    assert finetune_lr_factor("org/hub-id") == (1.0, None)


def test_unlearn_scales_the_preset_lr_by_the_fine_tuning_run(taught, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(taught["dir"], model)
    _card(model, lr=FINETUNE_PRESETS["tiny"]["lr"] / 3, preset="tiny")  # taught at a third of the preset's lr
    args = ["unlearn", "--model", str(model), "--forget", str(taught["forget"]), "--retain", str(taught["retain"]),
            "--method", "npo", "--no-progress", "unlearn.train.steps=1", "unlearn.batch_size=4"]
    assert main([*args, "--out", str(tmp_path / "u")]) == 0
    assert "preset lr scaled by 0.333" in capsys.readouterr().err
    used = json.loads((tmp_path / "u" / "results.json").read_text())["config"]["unlearn"]["train"]
    assert used["lr"] == pytest.approx(method_defaults("npo", "tiny")["lr"] / 3)
    assert main([*args, "--out", str(tmp_path / "v"), "unlearn.train.lr=1e-4"]) == 0  # a given lr is the user's
    assert json.loads((tmp_path / "v" / "results.json").read_text())["config"]["unlearn"]["train"]["lr"] == 1e-4
