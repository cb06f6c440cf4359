"""``obliviate reproduce atwu`` on a very small world (results contract, report, resume), TOFU part, claims."""

import json
import math

import pytest

from obliviate.errors import ConfigError

SMALL_WORLD = ["pretrain.world.n_forget=3", "pretrain.world.n_holdout=1", "pretrain.world.n_retain=3",
               "pretrain.world.n_general=3", "pretrain.world.n_concept=2", "pretrain.world.n_toxic=4",
               "pretrain.model.size=nano", "pretrain.model.vocab_size=400", "pretrain.batch_size=4",
               "pretrain.train.steps=20", "pretrain.train.warmup_steps=2"]
SMALL_TOFU = ["tofu.limit=8", "tofu.epochs=2", "tofu.batch_size=4", "tofu.warmup_steps=0", "tofu.model.n_layer=2",
              "tofu.model.d_model=32", "tofu.model.n_head=2", "tofu.model.vocab_size=400", "tofu.max_new_tokens=4"]


def reproduce(out, overrides):
    from obliviate.cli.main import main

    # Overrides right after the recipe name: argparse binds both positionals at the first one.
    assert main(["reproduce", "atwu", *overrides, "--out", str(out), "--seed", "1", "--no-progress"]) == 0


@pytest.mark.heavy(5)
def test_world_part_results_report_and_resume(tmp_path, monkeypatch):
    out = tmp_path / "atwu"
    argv = [*SMALL_WORLD, "methods=[atwu,graddiff]",
            "runs.atwu.train.steps=2", "runs.graddiff.train.steps=2", f"tofu.data={tmp_path / 'none'}"]
    reproduce(out, argv)
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete" and res["seed"] == 1
    m = res["metrics"]
    for name in ("atwu", "graddiff"):
        assert {"uq", "fq", "rd", "s_unlearning", "forget_qa_em", "forget_score"} <= set(m[name]), name
    assert 0.0 <= m["atwu"]["token_auroc"] <= 1.0  # learned scores
    assert "token_auroc" not in m["graddiff"]
    assert m["token_baselines"]["uniform"]["token_auroc"] == 0.5
    assert set(m["token_baselines"]) == {"uniform", "probability", "rarity"}
    assert m["token_labels"]["n_specific"] > 0 and m["token_labels"]["n_structural"] > 0
    assert "total_seconds" in res["timings"] and "total_seconds" not in m
    # No TOFU data: the part is skipped with a note, not an error.
    assert res["notes"]["tofu"].startswith("TOFU data not found")
    report = (out / "report.md").read_text()
    assert "Skipped: TOFU data not found" in report and "Made by: `obliviate " in report
    assert "token AUROC" in report and (out / "token_auroc.png").exists()
    assert len(res["claims"]) == 4 and all(c["sentence"] for c in res["claims"])
    assert "(world, TOFU not run)" in res["claims"][0]["ours"] or res["claims"][0]["agreement"] == "not testable here"
    assert (out / "parts" / "world" / "atwu.json").exists()

    # A rerun into the same directory reuses every finished method.
    import obliviate.papers.atwu.run as recipe_mod

    def no_training(*a, **k):
        raise AssertionError("a finished method was trained again")

    monkeypatch.setattr(recipe_mod, "unlearn", no_training)
    reproduce(out, argv)
    assert json.loads((out / "results.json").read_text())["metrics"] == m


def test_tofu_part_on_a_few_examples(tmp_path):
    from obliviate.pipelines.tofu import REQUIRED_FILES
    from obliviate.utils import data_dir

    d = data_dir() / "tofu"
    if not all((d / f"{s}.json").is_file() for s in REQUIRED_FILES):
        pytest.skip(f"TOFU data not present in {d}")
    out = tmp_path / "tofu"
    reproduce(out, ["parts=[tofu]", "methods=[atwu,npo]", *SMALL_TOFU,
               "tofu_runs.atwu.train.steps=2", "tofu_runs.atwu.batch_size=4", "tofu_runs.npo.train.steps=2",
               "tofu_runs.npo.batch_size=4"])
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]
    assert res["notes"]["tofu"] == "ran"
    for name in ("atwu", "npo"):
        for key in ("tofu_forget_quality", "tofu_model_utility", "tofu_forget10_rouge_l", "tofu_retain_rouge_l"):
            assert math.isfinite(m[name][key]), (name, key)
        assert "tofu_uq" in m[name] and "token_auroc" not in m[name]
    assert 0.0 <= m["base"]["tofu_forget10_rouge_l"] <= 1.0 and "tofu_model_utility" in m["tofu_retain_model"]
    assert "TOFU (tiny-model protocol)" in (out / "report.md").read_text()


def test_claims_from_hand_made_metrics():
    from obliviate.config import to_dict
    from obliviate.papers.atwu import AtwuRecipeConfig, make_claims

    methods = ["atwu", "npo", "atwu_npo"]
    metrics = {
        "base": {"tofu_model_utility": 0.50},
        "atwu": {"tofu_uq": 80.0, "token_auroc": 0.70, "tofu_model_utility": 0.47},
        "npo": {"tofu_uq": 72.0},
        "atwu_npo": {"tofu_uq": 90.0},  # an ATWU variant is not the runner-up
        "token_baselines": {"uniform": {"token_auroc": 0.5}, "rarity": {"token_auroc": 0.95}},
    }
    results = {"config": to_dict(AtwuRecipeConfig(methods=methods)), "metrics": metrics,
               "notes": {"methods": methods, "parts": ["world", "tofu"], "tofu": "ran"}}
    c = make_claims(results)
    assert [x.agrees for x in c] == [True, True, False, True]
    assert c[1].ours == "+8.0 points over npo" and "and size" in c[1].sentence  # 80 - 72 = 8 >= 5.8
    assert "rarity 0.95" in c[2].sentence and "above uniform 0.50" in c[2].sentence
    assert "drop 6%" in c[3].ours  # (0.50 - 0.47) / 0.50 = 0.06 <= 0.1
    metrics["atwu"]["tofu_model_utility"] = 0.40  # a 20% drop
    metrics["npo"]["tofu_uq"] = 85.0
    c = make_claims(results)
    assert [x.agrees for x in c] == [False, False, False, False] and c[1].ours == "-5.0 points over npo"


def test_config_errors_name_the_key(tmp_path):
    from obliviate.config import from_dict
    from obliviate.papers.atwu.run import AtwuRecipeConfig, run

    with pytest.raises(ConfigError, match="unknown method 'nope'"):
        from_dict(AtwuRecipeConfig, {"methods": ["atwu", "nope"]})
    with pytest.raises(ConfigError, match="config key 'parts'"):
        from_dict(AtwuRecipeConfig, {"parts": ["world", "mars"]})
    with pytest.raises(ConfigError, match="runs.rmu"):
        from_dict(AtwuRecipeConfig, {"runs": {"rmu": {"train": {"lr": 1e-3}}}})
    bad = from_dict(AtwuRecipeConfig, {"tofu_runs": {"atwu": {"params": {"nope": 1}}}})
    with pytest.raises(ConfigError, match="nope"):  # before any model is built or trained
        run(bad, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_atwu_token_auroc_beats_uniform_on_the_default_world(tmp_path):
    """Default world (seed 0) and base model, recipe settings: the learned scores beat uniform (0.5)."""
    from obliviate.config import from_dict
    from obliviate.papers.atwu import AtwuRecipeConfig, run_world

    cfg = from_dict(AtwuRecipeConfig, {"methods": ["atwu"], "parts": ["world"]})
    metrics, _ = run_world(cfg, ["atwu"], tmp_path, progress=False)
    assert metrics["token_baselines"]["uniform"]["token_auroc"] == 0.5
    assert metrics["atwu"]["token_auroc"] > 0.6  # recorded: 0.761 (unlearned reading 0.778)


def test_quick_runs_the_world_part_with_the_quick_methods(tmp_path, monkeypatch):
    import obliviate.papers.atwu.run as recipe_mod
    from obliviate.config import from_dict

    calls = []

    def fake_world(cfg, methods, out, progress):
        calls.append(("world", list(methods)))
        m = {n: {"uq": 50.0, "forget_qa_acc": 0.0, "rd": 0.0} for n in methods}
        m["atwu"]["token_auroc"] = 0.8
        m["base"] = {"forget_qa_acc": 1.0}
        m["token_baselines"] = {"uniform": {"token_auroc": 0.5}}
        m["token_labels"] = {"n_specific": 2, "n_structural": 3}
        return m, {}

    def fake_tofu(*a, **k):
        raise AssertionError("--quick must not run the TOFU part")

    monkeypatch.setattr(recipe_mod, "run_world", fake_world)
    monkeypatch.setattr(recipe_mod, "run_tofu_part", fake_tofu)
    cfg = from_dict(recipe_mod.AtwuRecipeConfig, {"quick": True, "quick_methods": ["atwu", "npo"]})
    res = recipe_mod.run(cfg, tmp_path, progress=False)
    assert calls == [("world", ["atwu", "npo"])] and res["notes"]["tofu"] == "not requested"
    assert json.loads((tmp_path / "results.json").read_text())["metrics"]["atwu"]["token_auroc"] == 0.8
    assert res["claims"][2].agrees is True  # 0.8 > uniform 0.5, the only baseline here
