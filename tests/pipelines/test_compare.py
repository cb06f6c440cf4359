"""The comparison pipeline end to end on a very small world (results contract, resume, report)."""

import json
from collections import Counter
from pathlib import Path

import pytest

from obliviate.cli.main import main
from obliviate.evidence.frontier import frontier_points, missing
from obliviate.models.load import load_model
from obliviate.runs.report import markdown_to_html

SMALL = ["pretrain.world.n_forget=3", "pretrain.world.n_holdout=1", "pretrain.world.n_retain=3",
         "pretrain.world.n_general=3", "pretrain.world.n_concept=2", "pretrain.world.n_toxic=4",
         "pretrain.model.size=nano", "pretrain.model.vocab_size=400", "pretrain.batch_size=4",
         "pretrain.train.steps=20", "pretrain.train.warmup_steps=2",
         "methods=[graddiff,rmu]", "runs.graddiff.train.steps=3", "runs.rmu.train.steps=3",
         "attacks.relearn.steps=2", "attacks.relearn.eval_every=2"]


def _counting(monkeypatch, module, name, log: Path):
    """Count the calls of ``module.name`` as lines of ``log``: compare computes its parts two at a time, and a
    call made in its second process reaches the file where it would not reach this process's memory."""
    real = getattr(module, name)

    def wrapped(*a, **k):
        with open(log, "a") as f:
            f.write(name + "\n")
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapped)


@pytest.mark.heavy(38)
def test_compare_results_contract_and_resume(tmp_path, capsys, monkeypatch):
    import obliviate.attacks.format_shift as format_shift
    import obliviate.attacks.mia as mia
    import obliviate.evidence.positive_controls as positive
    import obliviate.attacks.probe as probe
    import obliviate.attacks.relearn as relearn
    import obliviate.attacks.relearn_disjoint as disjoint
    import obliviate.pipelines.compare.run as compare

    log = tmp_path / "calls.txt"
    for module, name in [(compare, "run_task_attacks"), (compare, "evaluate_task"), (relearn, "relearn_attack"),
                         (disjoint, "relearn_attack"), (probe, "value_probe_attack"), (mia, "mia_metrics"),
                         (format_shift, "format_shift_attack")]:
        _counting(monkeypatch, module, name, log)
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--seed", "2", "--no-progress", *SMALL]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete" and res["seed"] == 2 and res["task"]["name"] == "world"
    m = res["metrics"]
    assert set(m) == {"base", "oracle", "positive_control", "positive_control_smallnorm", "second_oracle", "filtered",
                      "graddiff", "rmu"}  # the known-removed models beside the oracle, in every world comparison
    # each model is evaluated once and attacked once; each attack runs once per model (the demo's one setting
    # per relearning attack: the corpus once, each of the three A/V/B folds once, and the learning run once)
    n = len(m)
    counts = Counter(log.read_text().split())
    assert counts == {"evaluate_task": n, "run_task_attacks": n, "relearn_attack": 5 * n,
                      "value_probe_attack": n, "mia_metrics": n, "format_shift_attack": n}
    for name in ("graddiff", "rmu"):
        for key in ("forget_qa_em", "forget_score", "retain_qa_em", "general_qa_em", "retain_score", "s_unlearning",
                    "relearn_acc", "forget_quality", "probe_acc", "forget_para_qa_em", "format_shift_acc"):
            assert key in m[name], (name, key)
        assert 0.0 <= m[name]["s_unlearning"] <= 1.0
    for name, row in m.items():
        assert set(row["attacks_run"]) == {"relearn", "relearn_disjoint", "mia", "probe", "format_shift", "quantize",
                                           "ablate", "logit_lens", "in_context"}, name  # the demo's: not gcg
        assert set(row["attack_cost"]) == set(row["attacks_run"]) == set(res["timings"][f"{name}_seconds_by_attack"])
        assert all(c["forwards"] > 0 for k, c in row["attack_cost"].items() if k != "format_shift"), name
        for key in ("relearn_disjoint_acc", "relearn_disjoint_start_acc", "recovery_cost_tokens", "recovery_cost_bound",
                    "relearn_disjoint_budget_limited", "learning_cost_tokens", "recovery_cost_vs_learning",
                    "recovery_cost_vs_learning_reason", "mia_auc_loss",
                    "mia_auc_zlib", "mia_auc_min_k", "mia_auc_min_k_plus_plus"):
            assert key in row, (name, key)
    assert set(res["robustness"]["verdicts"]) == {"second_oracle", "filtered", "graddiff", "rmu"}
    assert {"second_oracle", "filtered"} <= set(res["model_dirs"])
    report = (out / "report.md").read_text()
    assert "## Robustness" in report and "### Robustness table" in report
    assert "## Which numbers to trust on this task" in report  # the metric trust section, in results.json too
    assert res["trust"]["groups"] == {"with": ["base", "positive_control", "positive_control_smallnorm"],
                                      "without": ["oracle", "second_oracle", "filtered"]}
    assert {"forget_score", "forget_qa_em", "quantize"} <= set(res["trust"]["reads"])
    fq = res["trust"]["reads"]["forget_qa_em"]
    assert fq["robust_quantize"] is not None and fq["n_with"] == fq["n_without"] == 3  # quantize rescores every metric
    assert "| forget_qa_em | metric | " in report and " (3 v 3) |" in report  # each AUC beside its pool sizes
    assert "| model | verdict | decided by |" in report and "| calibrated? |" in report
    # each model's cost as a share of the oracle's pretraining, the known-removed models' whole pretrainings included:
    # the ratios of the integers recorded beside them, printed and in the report's cost table
    cost, pre = res["cost"], res["cost"]["oracle_pretraining"]
    assert pre["tokens"] == pre["passes"]["forward_tokens"] + pre["passes"]["backward_tokens"] > 0
    assert set(cost["removal"]) == {"oracle", "graddiff", "rmu", "second_oracle", "filtered"}  # no base, no control
    for name, r in cost["removal"].items():
        assert cost["share_of_oracle_pretraining"][name] == r["tokens"] / pre["tokens"], name
        assert cost["share_of_oracle_pretraining_flops"][name] == r["flops"] / pre["flops"], name
    for name in ("second_oracle", "filtered"):  # the passes of its pretraining, as pretrain.json records them
        passes = json.loads((out / "models" / name / "pretrain.json").read_text())["passes"]
        assert cost["removal"][name]["tokens"] == passes["forward_tokens"] + passes["backward_tokens"], name
    shares = cost["share_of_oracle_pretraining"]
    assert shares["oracle"] == 1.0 and 0.5 < shares["second_oracle"] < 2  # a whole retraining on the same data
    assert max(shares["graddiff"], shares["rmu"]) < shares["second_oracle"]  # 3 unlearning steps against 20
    assert "## Cost as a share of retraining" in report and "| second_oracle | " in report
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cost: each model's")]
    assert len(printed) == 1 and "second_oracle " in printed[0] and "filtered " in printed[0]
    # read where the base model has the attack's reference (here it knows no forget answer: no relearning target)
    assert {"quantize", "ablate", "logit_lens", "in_context"} <= set(res["robustness"]["calibration"])
    assert res["timings"]["positive_control_smallnorm"]["steps"] >= 0
    html = (out / "report.html").read_text()
    # the frontier is drawn where some model has a cost share and a calibrated attack's recovery
    drawn = any(not missing(p) for p in frontier_points(res))
    assert (out / "plots" / "frontier.png").exists() == drawn
    assert html.count("data:image/png;base64,") == 5 + drawn and "relearning" in html
    assert (out / "methods" / "rmu" / "result.json").exists()
    _check_models(out, res)

    # One vocabulary: `eval --task world` on the same model writes the same keys with the same values.
    world = [o.replace("pretrain.world.", "world.") for o in SMALL if o.startswith("pretrain.world.")]
    assert main(["eval", "--model", str(out / "models" / "oracle"), "--out", str(tmp_path / "eval"), "--seed", "2",
                 "--no-progress", *world]) == 0
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())["metrics"]["model"]
    assert evaluated == {k: m["oracle"][k] for k in evaluated}

    # A second run with the same config reuses the finished methods and gives the same metrics.
    def no_training(*a, **k):
        raise AssertionError("a finished method was trained again")

    monkeypatch.setattr(compare, "unlearn", no_training)
    monkeypatch.setattr(positive, "suppression_control", no_training)  # the controls are parts too
    monkeypatch.setattr(positive, "small_norm_control", no_training)
    (out / "results.json").unlink()
    assert main(["demo", "--out", str(out), "--seed", "2", "--no-progress", *SMALL]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["metrics"] == m
    assert again["model_dirs"] == res["model_dirs"]  # a resumed method keeps its saved model
    _check_models(out, again)


def test_demo_and_compare_on_the_world_are_one_code_path(tmp_path, monkeypatch):
    """``demo`` is ``compare --task world`` with the demo's defaults: both reach the one comparison function."""
    import obliviate.pipelines.compare.run as pipeline
    from obliviate.pipelines.compare.run import DEMO

    calls = []

    class Stop(Exception):
        pass

    def spy(task, plan, out, **kw):
        calls.append((task.name, plan.cfg.methods, plan.cfg.attacks.lr_grid, task.meta["world_seed"]))
        raise Stop

    monkeypatch.setattr(pipeline, "run_compare", spy)  # what the command's pipeline (run_compare_dir) calls
    for argv in (["demo"], ["compare", "--task", "world"], ["compare"]):
        with pytest.raises(Stop):
            from obliviate.cli.main import _main

            _main([*argv, "--out", str(tmp_path / argv[-1]), "--seed", "3", "--no-progress"])
    assert calls[0] == ("world", DEMO["methods"], DEMO["attacks"]["lr_grid"], 3)
    assert calls[1] == calls[2] == ("world", None, None, 3)  # compare: every method, the attacker's whole grid


def _check_models(out: Path, res: dict) -> None:
    """The run directory holds every model it reports on, and each loads."""
    dirs = res["model_dirs"]
    assert set(dirs) == set(res["metrics"])
    refs = ("base", "oracle", "positive_control", "positive_control_smallnorm", "second_oracle", "filtered")
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
    png.write_bytes(b"\x89PNG\r\n\x1a\n fake")
    md = "# T\n\n| a | b |\n|---|---|\n| 1 | **x** |\n\n- one\n- two\n\n![p](p.png)\n"
    html = markdown_to_html(md, tmp_path, images=["p.png"])
    assert "<h1>T</h1>" in html and "<td>1</td><td><b>x</b></td>" in html
    assert "<li>one</li><li>two</li>" in html
    assert base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode() in html


@pytest.mark.slow  # two full compares: 55 s of the default suite
def test_a_rerun_with_another_seed_rebuilds_the_base_models_and_redoes_the_methods(tmp_path, monkeypatch):
    """A run directory keeps its models and finished methods only for the run that made them (review finding:
    a second demo with another seed into the same --out evaluated the first seed's base model)."""
    import obliviate.pipelines.compare.run as compare

    out = tmp_path / "demo"
    small = [o for o in SMALL if not o.startswith(("methods=", "runs.rmu"))] + ["methods=[graddiff]"]
    assert main(["demo", "--out", str(out), "--seed", "2", "--no-progress", *small]) == 0
    first = (out / "models" / "base" / "model.safetensors").read_bytes()
    trained = []
    real = compare.unlearn
    monkeypatch.setattr(compare, "unlearn", lambda *a, **k: trained.append(1) or real(*a, **k))
    assert main(["demo", "--out", str(out), "--seed", "3", "--no-progress", *small]) == 0
    assert (out / "models" / "base" / "model.safetensors").read_bytes() != first  # seed 3's own base model
    assert trained == [1]  # graddiff ran again: its part was made on another run


def test_a_link_among_the_run_models_is_refused_with_its_target_untouched(tmp_path, capsys):
    """OUT/models/base a symbolic link to a folder elsewhere: compare refuses it in one line, before anything is
    removed or copied through it (issue #27: no write through a link)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    out = tmp_path / "demo"
    (out / "models").mkdir(parents=True)
    (out / "models" / "base").symlink_to(elsewhere, target_is_directory=True)
    small = [o for o in SMALL if not o.startswith(("methods=", "runs.rmu"))] + ["methods=[graddiff]"]
    assert main(["demo", "--out", str(out), "--seed", "2", "--no-progress", *small]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("obliviate: error: ")]
    assert len(errors) == 1 and err[-1] == errors[0] and "symbolic link" in err[-1] and "models/base" in err[-1]
    assert err[0].startswith("obliviate: compare: ")  # the only lines before it: the plan, said before any run
    assert (elsewhere / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep.txt"]


def test_robustness_over_seeds_puts_the_runs_side_by_side():
    from obliviate.pipelines.compare.report import robustness_over_seeds

    def run(v, calibrated):
        return {"robustness": {"verdicts": {"npo": v},
                               "calibration": {"quantize": {"calibrated": calibrated,
                                                            "calibrated_by": ["positive_control_smallnorm"]
                                                            if calibrated else []}}},
                "metrics": {"npo": {"attack_cost": {"quantize": {"forwards": 10, "backwards": 0, "tokens": 100}}},
                            "base": {"attack_cost": {"quantize": {"forwards": 20, "backwards": 0, "tokens": 300}}}},
                "timings": {"npo_seconds_by_attack": {"quantize": 1.0}, "base_seconds_by_attack": {"quantize": 3.0}}}

    md = "\n".join(robustness_over_seeds({
        "seed 0": run({"verdict": "suppressed", "attack": "quantize", "control": "positive_control_smallnorm"}, True),
        "seed 1": run({"verdict": "inconclusive", "attack": None, "control": None}, False)}))
    assert "| npo | suppressed (quantize, positive_control_smallnorm) | inconclusive |" in md
    assert "| quantize | yes: positive_control_smallnorm | no |" in md
    assert "| quantize | 15 | 0 | 200 | 2 |" in md  # the mean over the four rows


@pytest.mark.parametrize("argv", [["compare"], ["demo"]])
def test_an_unknown_attack_name_is_one_line_before_anything_runs(tmp_path, capsys, argv):
    out = tmp_path / "out"
    assert main([*argv, "--attacks", "quantize,quantise", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["obliviate: error: unknown attack 'quantise' (valid: all, relearn, relearn_disjoint, "
                   "relearn_retain, mia, probe, format_shift, quantize, ablate, logit_lens, in_context, prompts, "
                   "unrelated_finetune, gcg, leak_at_k, soft_prompt, prune, gcg_prefix)"]
    assert not out.exists()


def test_the_api_takes_the_same_attack_names(tmp_path):
    import obliviate
    from obliviate.errors import ConfigError
    from obliviate.tasks.base import Data, Task

    task = Task("t", forget=Data(qa=[("q1?", "a1"), ("q2?", "a2")]), retain=Data(qa=[("q3?", "a3")]))
    for call in (lambda: obliviate.attack(None, None, task, attacks="ablate,nosuch"),
                 lambda: obliviate.compare(None, None, task, tmp_path / "c", attacks=["nosuch"])):
        with pytest.raises(ConfigError, match="^unknown attack 'nosuch'"):
            call()


def test_each_models_cost_is_its_unlearning_or_the_pretraining_beside_it_as_a_share_of_the_oracles(tmp_path):
    """``cost.removal``: a method's unlearning stage (what it cost when built, for one found made), and the whole
    pretraining (with the labelling run it records) of every model a pretraining run made, the known-removed
    models and a pretraining-time method alike; never the base model's pretraining or a control. The shares are
    the ratios of those recorded integers to the oracle's."""
    from obliviate.pipelines.compare.report import cost_share_markdown
    from obliviate.pipelines.compare.run import oracle_pretraining, removal_costs
    from obliviate.runs.cost import pass_flops, pass_tokens, removal_shares, stage_record

    def passes(f, b):
        return {"forwards": 3, "backwards": 3, "forward_tokens": f, "backward_tokens": b}

    made = {"base": {"passes": passes(6_007, 6_007)}, "second_oracle": {"passes": passes(5_003, 5_003)},
            "filtered": {"passes": passes(6_001, 6_001), "masked_tokens": 997},
            "routed": {"passes": passes(6_011, 6_011), "labelling": {"passes": passes(77, 0), "what": "a classifier"}},
            "halved": {"passes": passes(3_000, 3_000), "resumed_from": 150},  # counted since its checkpoint only
            "whole": {"passes": passes(6_000, 6_000), "resumed_from": 150, "passes_whole_run": True},
            "positive_control": None}
    dirs = {}
    for name, info in made.items():
        (tmp_path / name).mkdir()
        if info:
            (tmp_path / name / "pretrain.json").write_text(json.dumps(info))
        dirs[name] = str(tmp_path / name)
    n = 1_100_003
    oracle = {"passes": passes(5_000, 5_000), "what": "the oracle's pretraining"}
    pre = {**oracle, "tokens": pass_tokens(oracle["passes"]), "flops": pass_flops(oracle["passes"], n), "n_params": n}
    stages = {"unlearn:npo": stage_record(passes(300, 200), 1.0),
              "unlearn:rmu": {**stage_record(None), "cached": True, "built": stage_record(passes(40, 40))}}
    removal = removal_costs(stages, ["npo", "rmu"], dirs, pre, n)
    assert list(removal) == ["oracle", "npo", "rmu", "second_oracle", "filtered", "routed", "halved", "whole"]
    assert removal["halved"]["tokens"] is None and "resumed at step 150" in removal["halved"]["what"]
    assert removal["whole"]["tokens"] == 12_000  # a resumed run that carried its counts over
    assert removal["rmu"]["tokens"] == 80 and removal["routed"]["tokens"] == 12_022 + 77  # the build's; the labeller's
    shares, flops = removal_shares(removal, pre)
    assert shares.pop("halved") is None and flops.pop("halved") is None  # unknown, never a half
    for name, r in removal.items():
        if name in shares:
            assert shares[name] == r["tokens"] / pre["tokens"] and flops[name] == r["flops"] / pre["flops"], name
    assert shares["oracle"] == flops["oracle"] == 1.0
    assert shares["second_oracle"] == 10_006 / 10_000 and flops["npo"] == (2 * 300 + 4 * 200) / (6 * 5_000)
    assert "997 loss-masked tokens were chosen by the world's token labels" in removal["filtered"]["what"]
    assert removal["routed"]["what"].endswith("plus its labelling: a classifier")
    md = "\n".join(cost_share_markdown({"removal": removal, "oracle_pretraining": pre,
                                        "share_of_oracle_pretraining": shares,
                                        "share_of_oracle_pretraining_flops": flops}))
    assert "## Cost as a share of retraining" in md and "| second_oracle | 10,006 | " in md and " 100% | " in md
    assert oracle_pretraining(dirs["halved"], given=False)["passes"] is None  # the oracle's, the same
    assert oracle_pretraining(dirs["whole"], given=False)["passes"] == made["whole"]["passes"]
    assert "No share: the oracle's pretraining is unknown: given" in "\n".join(cost_share_markdown(
        {"removal": {}, "oracle_pretraining": {"passes": None, "what": "unknown: given"}}))
