"""Issue #28, item 9: the probe and the MIA beside a negative control (the model before it was taught the task),
called calibrated only when they separate from it."""

import argparse

import pytest

from obliviate.evidence.verdict import MIA_SEPARATION, PROBE_SEPARATION, control_readout
from obliviate.runs.card import untaught_model, write_model_card

from tests._run_dirs import tiny_model_dir


@pytest.mark.parametrize("probe, ctl_probe, auc, ctl_auc, want_probe, want_mia", [
    (0.81, 0.80, 0.65, 0.62, False, False),  # issue #28: a never-taught model reads the same: surface, not knowledge
    (0.97, 0.60, 0.90, 0.50, True, True),
    (0.60 + PROBE_SEPARATION, 0.60, 0.50 + MIA_SEPARATION, 0.50, True, True),  # the boundaries count
    (0.65, 0.60, 0.60, 0.50, False, False),
])
def test_calibrated_only_when_the_figure_separates_from_the_control(probe, ctl_probe, auc, ctl_auc, want_probe,
                                                                     want_mia):
    m = {"probe_acc": probe, "probe_chance": 0.5, "mia_auc_min_k": auc, "mia_auc_loss": auc}
    r = control_readout(m, {"probe_acc": ctl_probe, "mia_auc_min_k": ctl_auc, "mia_auc_loss": ctl_auc})
    assert r["probe_calibrated"] is want_probe and r["mia_calibrated"] is want_mia
    assert r["probe_control_acc"] == ctl_probe and r["mia_auc_min_k_control"] == ctl_auc
    assert r["probe_chance"] == ctl_probe and r["probe_chance_uniform"] == 0.5  # chance = what the control scores


def test_without_a_control_the_figures_are_uncalibrated():
    r = control_readout({"probe_acc": 0.99, "probe_chance": 0.25, "mia_auc_min_k": 0.99}, None)
    assert r == {"probe_control_acc": None, "probe_calibrated": False, "mia_auc_min_k_control": None,
                 "mia_calibrated": False}


def test_the_untaught_model_is_read_from_the_model_cards(tmp_path):
    random = tiny_model_dir(tmp_path)  # the model the lookup names is checked to be one
    write_model_card(tmp_path / "ft", base_model=str(random), task="files", method="finetune",
                     settings={}, metrics={})
    write_model_card(tmp_path / "npo", base_model=str(tmp_path / "ft"), task="files", method="npo", settings={},
                     metrics={})
    assert untaught_model(tmp_path / "npo") == str(random)
    assert untaught_model(tmp_path / "ft") == str(random)
    assert untaught_model(random) is None  # no card


def test_attack_runs_the_negative_control_beside_the_model(tmp_path, small_world, world_tokenizer, world_model):
    from obliviate.cli.attack import register
    from obliviate.models import save_model, save_tokenizer, tiny_llama
    from obliviate.runs.results import read_results

    save_model(tiny_llama(vocab_size=len(world_tokenizer), n_layer=2, d_model=32, n_head=2, seed=1),
               tmp_path / "random")
    save_model(world_model, tmp_path / "ft")
    save_tokenizer(world_tokenizer, str(tmp_path / "ft"))
    write_model_card(tmp_path / "ft", base_model=str(tmp_path / "random"), task="world", method="finetune",
                     settings={}, metrics={})
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    world = [f"world.{k}={getattr(small_world.config, k)}" for k in
             ("n_forget", "n_holdout", "n_retain", "n_general", "n_concept", "n_toxic")]
    args = parser.parse_args(["attack", "--model", str(tmp_path / "ft"), "--out", str(tmp_path / "run"),
                              "--control", "untaught", "--no-progress", "attacks.relearn=false",
                              "attacks.relearn_disjoint=false", "attacks.format_shift=false", *world])
    args.fn(args)
    res = read_results(tmp_path / "run")
    m = res["metrics"]
    assert res["negative_control_dir"] == str(tmp_path / "random")
    ctl = m["negative_control"]
    assert m["probe_control_acc"] == ctl["probe_acc"] and m["mia_auc_min_k_control"] == ctl["mia_auc_min_k"]
    assert m["probe_calibrated"] is (abs(m["probe_acc"] - ctl["probe_acc"]) >= PROBE_SEPARATION)
    assert m["mia_calibrated"] is (abs(m["mia_auc_min_k"] - ctl["mia_auc_min_k"]) >= MIA_SEPARATION)


def _user_models(tmp_path, settings: dict):
    """A user's files, a random-init Llama with its own tokenizer (``random``), and a "fine-tuned" copy of it whose
    card says ``obliviate finetune`` made it from ``random`` with ``settings`` (the weights need not have learned
    anything: only what the control is built from, and how, is checked)."""
    import shutil

    from tests.tasks._userdata import save_tiny_model, write_user_files

    paths = write_user_files(tmp_path / "data", n_forget=8, n_retain=8)
    save_tiny_model(tmp_path / "random", "llama", paths["texts"], d_model=32)
    shutil.copytree(tmp_path / "random", tmp_path / "ft")
    write_model_card(tmp_path / "ft", base_model=str(tmp_path / "random"), task="files", method="finetune",
                     settings=settings, metrics={})
    files = ["--forget", str(paths["forget"]), "--retain", str(paths["retain_qa"]), "--holdout",
             str(paths["retain_qa"])]
    return files, ["--no-progress", "attacks.relearn=false", "attacks.relearn_disjoint=false",
                   "attacks.format_shift=false"]


def test_retain_finetune_control_is_the_untaught_model_taught_the_retain_data_with_the_cards_settings(tmp_path,
                                                                                                      capsys):
    """attack --control retain-finetune: the untaught model named by the fine-tuned model's card, fine-tuned on the
    retain pairs only with the epochs, lr and batch size that card records, cached under OUT/control and attacked
    as the control; a rerun reuses it."""
    from safetensors.torch import load_file

    from obliviate.cli.main import main
    from obliviate.runs.results import read_results

    settings = {"epochs": 3, "lr": 2e-3, "batch_size": 4, "max_len": 64, "warmup_frac": 0.0, "weight_decay": 0.0,
                "data": "both", "seed": 0, "steps": 12, "preset": "tiny"}
    files, rest = _user_models(tmp_path, settings)
    argv = ["attack", "--model", str(tmp_path / "ft"), *files, "--out", str(tmp_path / "run"), "--control",
            "retain-finetune", *rest]
    assert main(argv) == 0
    res = read_results(tmp_path / "run")
    control = tmp_path / "run" / "control" / "model"
    assert res["negative_control_kind"] == "retain-finetune" and res["negative_control_dir"] == str(control)
    assert res["untaught_model_dir"] == str(tmp_path / "random")
    built = res["negative_control_build"]["finetune"]
    assert (built["epochs"], built["lr"], built["batch_size"], built["data"]) == (3, 2e-3, 4, "retain")
    assert built["steps"] == 3 * 2  # 3 epochs of the 8 retain pairs in batches of 4: the forget pairs are not in it
    before, after = load_file(tmp_path / "random" / "model.safetensors"), load_file(control / "model.safetensors")
    assert any(not (before[k] == after[k]).all() for k in before)  # it was trained
    m = res["metrics"]
    assert m["mia_auc_min_k_control"] == m["negative_control"]["mia_auc_min_k"]
    assert "fine-tuned on the retain data only" in capsys.readouterr().err
    stamp = (control / "model.safetensors").stat().st_mtime_ns
    assert main(argv) == 0  # the rerun finds the control made from the same model, data and settings
    assert (control / "model.safetensors").stat().st_mtime_ns == stamp
    assert read_results(tmp_path / "run")["metrics"]["mia_auc_min_k_control"] == m["mia_auc_min_k_control"]


def test_retain_finetune_without_an_untaught_model_is_one_line(tmp_path, capsys):
    from obliviate.cli.main import main
    from tests._cli_errors import one_error

    files, rest = _user_models(tmp_path, {})
    argv = ["attack", "--model", str(tmp_path / "random"), *files, "--out", str(tmp_path / "run"), "--control",
            "retain-finetune", *rest]
    assert main(argv) == 2
    assert "--base-untrained" in one_error(capsys) and not (tmp_path / "run").exists()
    assert main([*argv[:-len(rest)], "--base-untrained", str(tmp_path / "random"), *rest,
                 "control_finetune.epoch=2"]) == 2
    assert "control_finetune.epoch" in one_error(capsys) and not (tmp_path / "run").exists()


def test_the_retain_only_settings_follow_the_card():
    from obliviate.evidence.retain_control import fine_tune_config

    # the preset's own epochs and lr stay the preset's (its floor on steps applies, as it did for the fine-tune)
    c = fine_tune_config({"epochs": 40, "lr": 3e-3, "batch_size": 8, "preset": "tiny", "data": "both", "seed": 3})
    assert (c.epochs, c.lr, c.batch_size, c.data, c.seed) == (None, None, 8, "retain", 3)
    c = fine_tune_config({"epochs": 7, "lr": 1e-4, "preset": "tiny"}, {"epochs": 2})
    assert (c.epochs, c.lr, c.seed) == (2, 1e-4, 0)
    assert fine_tune_config({}).data == "retain"
