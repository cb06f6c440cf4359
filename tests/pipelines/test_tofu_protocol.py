"""The tiny-model TOFU protocol end to end on a few examples (skipped without the TOFU files)."""

import argparse
import json
import math
from pathlib import Path

import pytest

from obliviate.errors import ConfigError, DataError
from obliviate.methods import method_defaults
from obliviate.runs.results import read_results
from obliviate.pipelines.tofu import REQUIRED_FILES, TofuConfig, run_tofu, tofu_config, unlearn_config
from obliviate.utils import data_dir

SMALL = ["limit=12", "epochs=2", "batch_size=4", "warmup_steps=0", "model.n_layer=2", "model.d_model=32",
         "model.n_head=2", "model.vocab_size=400", "max_new_tokens=4", "unlearn.train.steps=2", "unlearn.batch_size=4"]


def need_tofu():
    d = data_dir() / "tofu"
    if not all((d / f"{s}.json").is_file() for s in REQUIRED_FILES):
        pytest.skip(f"TOFU data not present in {d}")


def tofu_cli(argv):
    from obliviate.cli.tofu import register

    p = argparse.ArgumentParser()
    register(p.add_subparsers(dest="command"))
    args = p.parse_args(argv)
    args.fn(args)


def test_protocol_end_to_end_and_cache(tmp_path, capsys):
    need_tofu()
    out = tmp_path / "graddiff"
    tofu_cli(["tofu", "--method", "graddiff", "--out", str(out), "--no-progress", *SMALL])
    res = read_results(out)
    m = res["metrics"]
    assert res["status"] == "complete" and set(m) == {"base", "retain_model", "graddiff"}
    assert 0.0 <= m["base"]["forget10_rouge_l"] <= 1.0
    for key in ("forget_quality", "model_utility", "forget10_rouge_l", "forget_prob", "forget_truth_ratio",
                "retain_prob", "real_authors_rouge_l", "world_facts_truth_ratio"):
        assert math.isfinite(m["graddiff"][key]), key
    assert 0.0 <= m["graddiff"]["forget_quality"] <= 1.0
    assert m["graddiff"]["forget10_rouge_l"] == m["graddiff"]["forget_rouge_l"]
    assert "per_example" not in m["graddiff"] and "forget_quality" not in m["retain_model"]
    assert not res["timings"]["base_cached"] and not res["timings"]["retain_model_cached"]
    per = json.loads((out / "per_example.json").read_text())
    assert len(per["graddiff"]["forget_truth_ratio"]) == 12 and len(per["retain_model"]["forget_truth_ratio"]) == 12
    printed = capsys.readouterr().out
    assert "graddiff:" in printed
    # extraction strength and exact memorization on the forget split; ../shared/data has no holdout10.json, so the
    # MIAs are absent and one line names the file looked for
    for name in ("base", "retain_model", "graddiff"):
        assert 0.0 <= m[name]["extraction_strength"] <= 1.0 and 0.0 <= m[name]["exact_memorization"] <= 1.0
        assert not [k for k in m[name] if k.startswith("mia_")]
    holdout = data_dir() / "tofu" / "holdout10.json"
    assert res["notes"] == [f"no holdout split: looked for {holdout}; mia_auc_loss, mia_auc_zlib, mia_auc_min_k, "
                            "mia_auc_min_k_plus_plus, mia_auc_gradnorm, mia_auc_reference not reported"]
    assert printed.count(f"note: no holdout split: looked for {holdout}") == 1

    # Another method reuses both cached base models and their evaluations.
    out2 = tmp_path / "npo"
    tofu_cli(["tofu", "--method", "npo", "--out", str(out2), "--no-progress", *SMALL])
    res2 = read_results(out2)
    assert res2["timings"]["base_cached"] and res2["timings"]["retain_model_cached"]
    assert res2["metrics"]["base"] == m["base"] and res2["metrics"]["retain_model"] == m["retain_model"]
    assert math.isfinite(res2["metrics"]["npo"]["forget_quality"])


def test_protocol_with_a_holdout_split_reports_six_mias(tmp_path, capsys):
    """A user's TOFU copy with holdout10.json (the hub release has it; here forget10's records 100-119, one
    fictitious author that neither model trains on with limit=12, in the forget split's format, next to the shared
    files): the base and unlearned models get OpenUnlearning's six MIAs, the retain model, the reference of
    mia_reference, the other five."""
    need_tofu()
    data = tmp_path / "data"
    (data / "tofu").mkdir(parents=True)
    for f in (data_dir() / "tofu").iterdir():
        (data / "tofu" / f.name).symlink_to(f.resolve())
    rows = [json.loads(line) for line in (data_dir() / "tofu" / "forget10.json").read_text().splitlines()][100:120]
    (data / "tofu" / "holdout10.json").write_text(
        "".join(json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n" for r in rows))
    out = tmp_path / "graddiff"
    tofu_cli(["tofu", "--method", "graddiff", "--out", str(out), "--no-progress", f"data={data}", *SMALL])
    res = read_results(out)
    m = res["metrics"]
    six = {f"mia_auc_{s}" for s in ("loss", "zlib", "min_k", "min_k_plus_plus", "gradnorm", "reference")}
    for name in ("base", "graddiff"):
        assert six <= set(m[name]) and all(0.0 <= m[name][k] <= 1.0 for k in six), name
    assert {k for k in m["retain_model"] if k.startswith("mia_")} == six - {"mia_auc_reference"}
    # the base model was trained on the 12 forget examples, the retain model not: the first tells them from the
    # holdout far better. Measured on seeds 0-9 (issue #56), loss AUC base / retain model: 0.993/0.340 (seed 0),
    # 0.903/0.194, 0.965/0.333, 1.0/0.819, 0.861/0.229, 0.799/0.188, 0.938/0.417, 1.0/0.361, 0.743/0.153,
    # 0.993/0.514: the base at least 0.743 and 0.181 above the retain model (the bounds 0.65 and 0.1 below; a fixed
    # 0.9 and 0.6 failed on seeds 3, 4, 5 and 8); GradNorm base above retain on all ten (0.729/0.285 on seed 0, by
    # 0.08 or more on nine, 0.333/0.326 on seed 9)
    assert m["base"]["mia_auc_loss"] >= max(0.65, m["retain_model"]["mia_auc_loss"] + 0.1)
    assert m["base"]["mia_auc_gradnorm"] > m["retain_model"]["mia_auc_gradnorm"]
    assert res["notes"] == ["mia_auc_reference: the retain model is the reference model, so it has no reference "
                            "score"]
    printed = capsys.readouterr().out
    assert "graddiff: mia_auc_gradnorm" in printed and "graddiff: extraction_strength" in printed


def test_forget_split_option(tmp_path, capsys):
    """``--forget forget01``: the retain-only model is trained on retain99, everything is evaluated on forget01."""
    need_tofu()
    out = tmp_path / "forget01"
    tofu_cli(["tofu", "--method", "graddiff", "--forget", "forget01", "--out", str(out), "--no-progress", *SMALL])
    res = read_results(out)
    m = res["metrics"]
    assert res["config"]["forget"] == "forget01"
    assert json.loads((Path(res["base_dirs"]["retain_model"]) / "config.json").read_text())["which"] == "retain99"
    for name in ("base", "retain_model", "graddiff"):
        assert m[name]["forget01_rouge_l"] == m[name]["forget_rouge_l"] and "forget10_rouge_l" not in m[name]
    assert math.isfinite(m["graddiff"]["forget_quality"])
    assert "base forget01 ROUGE-L" in capsys.readouterr().out


def test_missing_data_is_a_clear_error(tmp_path):
    (tmp_path / "tofu").mkdir()
    (tmp_path / "tofu" / "full.json").write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(DataError, match=r"TOFU data not found: .*lacks retain90.json, forget10.json"):
        run_tofu(TofuConfig(data=str(tmp_path)), tmp_path / "out")
    assert not (tmp_path / "out" / "results.json").exists()


def test_unknown_method_fails_before_anything(tmp_path):
    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        run_tofu(TofuConfig(method="nope", data=str(tmp_path)), tmp_path / "out")


def test_unlearn_defaults_and_overrides():
    tiny = method_defaults("rmu", "tiny")
    u = unlearn_config(TofuConfig(method="rmu"))
    assert u.method == "rmu" and u.train.lr == tiny["lr"]
    assert u.train.steps == tiny["steps"] and u.params == tiny["params"]
    u = unlearn_config(tofu_config(method="rmu", unlearn={"train": {"lr": 5e-4, "steps": 7}, "params": {"coef": 3.0}}))
    assert (u.train.lr, u.train.steps) == (5e-4, 7)
    assert u.params == {**tiny["params"], "coef": 3.0}


def test_config_validation():
    with pytest.raises(ConfigError, match="limit"):
        TofuConfig(limit=0)
    with pytest.raises(ConfigError, match="epochs"):
        TofuConfig(epochs=0)
    with pytest.raises(ConfigError, match="unknown config key 'model.width'"):
        tofu_config(model={"width": 3})
