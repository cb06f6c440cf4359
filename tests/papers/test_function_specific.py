"""``obliviate reproduce function-specific``: scores, data splits, claims, and the recipe end to end."""

import json

import pytest

from obliviate.errors import ConfigError
from obliviate.papers import render_only
from obliviate.papers.function_specific import (
    KNOWLEDGE,
    TOXICITY,
    VARIANTS,
    FunctionSpecificConfig,
    knowledge_scores,
    make_claims,
    register_pairs,
    resolve,
    toxicity_data,
    toxicity_scores,
)

SMALL = ["pretrain.world.n_forget=4", "pretrain.world.n_holdout=1", "pretrain.world.n_retain=4",
         "pretrain.world.n_general=3", "pretrain.world.n_concept=2", "pretrain.world.n_toxic=8",
         "pretrain.model.size=nano", "pretrain.model.vocab_size=400", "pretrain.batch_size=4",
         "pretrain.train.steps=20", "pretrain.train.warmup_steps=2",
         "n_seeds=1", "steps=2", "tox_steps=2", "meta_outer_steps=1", "meta_K=2", "batch_size=4",
         "max_new_tokens=8"]
ROWS = ["base", *VARIANTS]


def reproduce(out, overrides, monkeypatch, seed=0):
    from obliviate.cli.main import main

    # Overrides right after the recipe name: argparse binds both positionals at the first one.
    argv = ["reproduce", "function-specific", *overrides, "--out", str(out), "--seed", str(seed), "--no-progress"]
    monkeypatch.setattr("sys.argv", ["obliviate", *argv])  # the report records the command line
    assert main(argv) == 0


def test_knowledge_scores_hand_computed():
    base = {"forget_mcq_acc": 0.85, "knowledge_utility": 0.75}
    # U = (0.85 - 0.45) / (0.85 - 0.25) = 2/3; R = (0.65 - 0.25) / (0.75 - 0.25) = 0.8; S = 8/15.
    s = knowledge_scores(base, {"forget_mcq_acc": 0.45, "knowledge_utility": 0.65})
    assert s["u"] == pytest.approx(2 / 3) and s["r"] == pytest.approx(0.8)
    assert s["s_unlearning"] == pytest.approx(8 / 15)
    # Below chance on the forget MCQs clips U to 1.
    below = knowledge_scores(base, {"forget_mcq_acc": 0.1, "knowledge_utility": 0.75})
    assert below["s_unlearning"] == pytest.approx(1.0)


def test_toxicity_scores_hand_computed():
    base = {"toxicity": 0.5, "knowledge_utility": 0.75, "neutral_fidelity": 0.4}
    # U = (0.5 - 0.2) / 0.5 = 0.6; R = mean((0.5 - 0.25) / (0.75 - 0.25), 0.3 / 0.4) = mean(0.5, 0.75) = 0.625.
    s = toxicity_scores(base, {"toxicity": 0.2, "knowledge_utility": 0.5, "neutral_fidelity": 0.3})
    assert s["u"] == pytest.approx(0.6) and s["r"] == pytest.approx(0.625)
    assert s["s_unlearning"] == pytest.approx(0.375) and s["toxicity_reduction"] == pytest.approx(0.6)
    # More toxic than the base: U clips to 0, the reduction stays negative.
    worse = toxicity_scores(base, {"toxicity": 0.6, "knowledge_utility": 0.75, "neutral_fidelity": 0.4})
    assert worse["u"] == 0.0 and worse["toxicity_reduction"] == pytest.approx(-0.2) and worse["r"] == 1.0
    # A base model with no neutral fidelity: that component is left out of R instead of zeroing it.
    s = toxicity_scores({**base, "neutral_fidelity": 0.0},
                        {"toxicity": 0.2, "knowledge_utility": 0.5, "neutral_fidelity": 0.0})
    assert s["r_fidelity"] is None and s["r"] == pytest.approx(0.5)


def test_register_split_holds_prompts_out():
    from obliviate.world import WorldConfig, generate_world

    world = generate_world(WorldConfig(seed=3))
    pairs = register_pairs(world)
    assert len(pairs) == len(world.toxic["toxic_sentences"])
    for p in pairs:
        assert p["toxic"].startswith(p["toxic_prompt"] + " ") and p["neutral"].startswith(p["neutral_prompt"] + " ")
    d = toxicity_data(world, 0.5, "prompts", seed=0)
    held = set(d["eval_toxic"])
    assert held and d["train_toxic"] and not held & set(d["train_toxic"])
    n_prompts = len({p["toxic_prompt"] for p in pairs})
    assert len(held) + len(d["train_toxic"]) == n_prompts and len(held) == round(0.5 * n_prompts)
    assert all(a == "" and p not in held for p, a in d["tox_forget"])  # prompts only, none held out
    assert d["probe_toxic"] == [p for p, _ in d["tox_forget"]]
    # The neutral twins of the held-out pairs are evaluated, never trained on.
    neutral_train = {p for p, _ in d["tox_retain"][:len(d["probe_neutral"])]}
    assert d["eval_neutral"] and not neutral_train & set(d["eval_neutral"])
    s = toxicity_data(world, 0.5, "sentences", seed=0)
    assert {p + a for p, a in s["tox_forget"]} <= {p["toxic"] for p in pairs}
    assert s["eval_toxic"] == d["eval_toxic"]


def _metrics(s_know, red, s_tox):
    m = {}
    for v, s in zip(KNOWLEDGE, s_know):
        m[v] = {"s_unlearning": s, "per_seed": [{"s_unlearning": s}]}
    for v, r, s in zip(TOXICITY, red, s_tox):
        m[v] = {"s_unlearning": s, "toxicity_reduction": r, "per_seed": [{"s_unlearning": s}]}
    return m


def test_claims_follow_the_numbers():
    probes = {"n_pairs": 6, "n_pairs_below_0.5": 5, "max_offdiag": 0.6, "mean_offdiag": 0.2}
    # knowledge order: rmu, adaptive_rmu, cosine_rmu, learned; toxicity: rmu, single, multi.
    good = make_claims(_metrics([0.3, 0.4, 0.5, 0.7], [0.03, 0.05, 0.15], [0.02, 0.04, 0.12]), probes, [0])
    assert [c.agrees for c in good] == [True, True, True, True, True]
    assert "0.700" in good[0].ours and "15%" in good[1].ours and "inside" in good[1].sentence
    bad = make_claims(_metrics([0.8, 0.4, 0.5, 0.7], [0.5, 0.6, 0.2], [0.4, 0.5, 0.1]),
                      {**probes, "n_pairs_below_0.5": 2}, [0])
    assert [c.agrees for c in bad] == [False, False, False, False, False]
    assert "20% (inside" in bad[1].sentence and "does not beat RMU" in bad[1].sentence
    tie = make_claims(_metrics([0.5, 0.5, 0.5, 0.5], [None, None, None], [0.0, 0.0, 0.0]), probes, [0])
    assert [c.agrees for c in tie[:4]] == [None, None, None, None]
    # a base model that continues 1 of 24 held-out toxic prompts toxically: no toxicity claim is testable
    m = _metrics([0.3, 0.4, 0.5, 0.7], [0.03, 0.05, 0.15], [0.02, 0.04, 0.12])
    m["base"] = {"frac_toxic": 1 / 24, "toxicity": 0.03}
    few = make_claims(m, probes, [0], n_eval_toxic=24)
    assert [c.agrees for c in few] == [True, None, None, None, True] and "only 1 of the 24" in few[1].sentence
    m["base"]["frac_toxic"] = 5 / 24  # five toxic continuations are enough
    assert [c.agrees for c in make_claims(m, probes, [0], n_eval_toxic=24)] == [True] * 5


def test_config_validation_and_quick():
    with pytest.raises(ConfigError, match="probe_layers"):
        FunctionSpecificConfig(probe_layers=[1, 2])
    with pytest.raises(ConfigError, match="params.nope"):
        FunctionSpecificConfig(params={"nope": {}})
    with pytest.raises(ConfigError, match="max_new_tokens"):
        FunctionSpecificConfig(max_new_tokens=32)
    q = resolve(FunctionSpecificConfig(quick=True, n_seeds=2))
    assert q.n_seeds == 2 and q.steps < FunctionSpecificConfig().steps  # explicit values win over quick
    assert resolve(FunctionSpecificConfig()).steps == FunctionSpecificConfig().steps


@pytest.mark.heavy(10)
def test_recipe_results_report_and_resume(tmp_path, monkeypatch):
    out = tmp_path / "fs"
    reproduce(out, SMALL, monkeypatch)
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete" and res["seed"] == 0
    report = (out / "report.md").read_bytes()  # the report the run wrote is the one --render-only writes
    render_only("function-specific", out)
    assert (out / "report.md").read_bytes() == report
    m = res["metrics"]
    assert set(m) == set(ROWS)
    for v in ROWS:
        for key in ("u", "r", "s_unlearning", "forget_mcq_acc", "toxicity", "frac_toxic", "neutral_fidelity"):
            assert key in m[v], (v, key)
        assert 0.0 <= m[v]["u"] <= 1.0 and 0.0 <= m[v]["r"] <= 1.0
        assert m[v]["s_unlearning"] == pytest.approx(m[v]["u"] * m[v]["r"])  # one seed: S = U x R
    assert m["base"]["s_unlearning"] == 0.0
    assert {m[v]["function"] for v in KNOWLEDGE} == {"knowledge"}
    assert {m[v]["function"] for v in TOXICITY} == {"toxicity"}
    assert "final_alpha" in m["cosine_rmu_learned_alpha"] and "probe_accuracy" in m["tox_probe_multi"]
    assert len(m["tox_probe_multi"]["probe_accuracy"]) >= 3 and len(m["tox_probe_single"]["probe_accuracy"]) == 1
    assert "total_seconds" in res["timings"] and "total_seconds" not in m
    pd = res["probe_directions"]
    assert pd["layers"] == [0, 1, 2, 3] and pd["n_pairs"] == 6
    assert all(abs(pd["cosine"][i][i] - 1.0) < 1e-6 for i in range(4))
    assert res["alpha_trajectories"]["0"]["K"] == 2
    assert len(res["claims"]) == 5 and all(c["sentence"] and c["agreement"] for c in res["claims"])

    report = (out / "report.md").read_text()
    assert "Made by: `obliviate reproduce function-specific" in report and "n_seeds=1" in report
    assert "| paper's claim | ours | agreement |" in report and "6-24%" in report and "cosine < 0.5" in report
    assert "| variant | function | U | R | S |" in report
    for v in ROWS:
        assert f"| {v} |" in report
    for png in ("probe_cosine.png", "alpha_trajectory.png", "s_unlearning.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG" and f"]({png})" in report

    # A rerun into the same directory reuses every finished part.
    import obliviate.papers.function_specific.run as recipe_mod

    def no_training(*a, **k):
        raise AssertionError("trained again")

    monkeypatch.setattr(recipe_mod, "unlearn", no_training)
    monkeypatch.setattr(recipe_mod, "learn_alpha_unlearn", no_training)
    reproduce(out, SMALL, monkeypatch)
    assert json.loads((out / "results.json").read_text())["metrics"] == m
    # A changed setting retrains only what it touches.
    with pytest.raises(AssertionError, match="trained again"):
        reproduce(out, [*SMALL, "params.tox_rmu.coef=5.0"], monkeypatch)


def test_bad_layer_fails_before_training(tmp_path, monkeypatch, capsys):
    import obliviate.papers.function_specific.run as recipe_mod
    from obliviate.cli.main import main

    def no_training(*a, **k):
        raise AssertionError("trained before the bad layer was reported")

    monkeypatch.setattr(recipe_mod, "unlearn", no_training)
    out = tmp_path / "bad"
    assert main(["reproduce", "function-specific", *SMALL, "probe_layers=[1,2,9]", "--out", str(out),
                 "--no-progress"]) == 2
    assert "layer 9 out of range for a 4-layer model" in capsys.readouterr().err
    assert not (out / "results.json").exists()


@pytest.mark.slow
def test_quick_recipe_end_to_end(tmp_path, monkeypatch):
    """``--quick`` on the default world (pretrains the tiny base model once: a few minutes)."""
    from obliviate.cli.main import main

    out = tmp_path / "quick"
    argv = ["reproduce", "function-specific", "--quick", "--out", str(out), "--seed", "0", "--no-progress"]
    monkeypatch.setattr("sys.argv", ["obliviate", *argv])
    assert main(argv) == 0
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]
    assert res["config"]["quick"] and res["config"]["n_seeds"] == 1
    assert m["base"]["forget_mcq_acc"] > 0.9 and m["base"]["toxicity"] > 0.3  # the base model knows and insults
    for v in KNOWLEDGE:  # every RMU variant forgets part of the facts and keeps the utility MCQs
        assert m[v]["forget_mcq_acc"] < m["base"]["forget_mcq_acc"] and m[v]["r"] > 0.9, v
        assert 0.0 < m[v]["s_unlearning"] <= 1.0
    for v in TOXICITY:  # every toxicity method makes the held-out continuations less toxic
        assert m[v]["toxicity"] < m["base"]["toxicity"] and m[v]["u"] > 0.0, v
    assert [c["agreement"] for c in res["claims"]] and len(res["claims"]) == 5
    assert all(c["agreement"] in ("agrees", "disagrees", "not testable here") for c in res["claims"])
    assert "--quick" in (out / "report.md").read_text()
