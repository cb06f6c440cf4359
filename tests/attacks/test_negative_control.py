"""Issue #28, item 9: the probe and the MIA beside a negative control (the model before it was taught the task),
called calibrated only when they separate from it."""

import argparse

import pytest

from obliviate.attacks.controls import MIA_SEPARATION, PROBE_SEPARATION, control_readout
from obliviate.runs.card import untaught_model, write_model_card


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
    write_model_card(tmp_path / "ft", base_model=str(tmp_path / "random"), task="files", method="finetune",
                     settings={}, metrics={})
    write_model_card(tmp_path / "npo", base_model=str(tmp_path / "ft"), task="files", method="npo", settings={},
                     metrics={})
    assert untaught_model(tmp_path / "npo") == str(tmp_path / "random")
    assert untaught_model(tmp_path / "ft") == str(tmp_path / "random")
    assert untaught_model(tmp_path / "random") is None  # no card


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
                              "--no-progress", "attacks.corpus=false", "attacks.disjoint=false",
                              "attacks.format_shift=false", *world])
    args.fn(args)
    res = read_results(tmp_path / "run")
    m = res["metrics"]
    assert res["negative_control_dir"] == str(tmp_path / "random")
    ctl = m["negative_control"]
    assert m["probe_control_acc"] == ctl["probe_acc"] and m["mia_auc_min_k_control"] == ctl["mia_auc_min_k"]
    assert m["probe_calibrated"] is (abs(m["probe_acc"] - ctl["probe_acc"]) >= PROBE_SEPARATION)
    assert m["mia_calibrated"] is (abs(m["mia_auc_min_k"] - ctl["mia_auc_min_k"]) >= MIA_SEPARATION)
