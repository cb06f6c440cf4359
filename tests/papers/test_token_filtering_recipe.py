"""The token-filtering recipe: pure analysis by hand, config checks, a tiny end-to-end run, resume, --quick (slow)."""

import json
import math

import numpy as np
import pytest

from obliviate.config import from_dict, to_dict
from obliviate.errors import ConfigError
from obliviate.papers import render_only
from obliviate.papers.token_filtering import claims as TFC
from obliviate.papers.token_filtering import report as TFR
from obliviate.papers.token_filtering import run as TF

TINY = dict(world=dict(seed=0, n_forget=6, n_holdout=1, n_retain=6, n_general=4, n_concept=2, n_toxic=4),
            vocab_size=300, eval_fraction=0.2, labeller_layers=1, labeller_d=32, labeller_steps=10,
            sae_latents=64, sae_k=8, sae_steps=30, min_ratio=1.5, bilm_d=16, bilm_steps=8,
            sizes=["1x8", "1x16"], tokens_per_param=1.0, pareto_thresholds=[0.5], noise_ps=[0.0, 0.2],
            adv_steps=4, adv_eval_every=2, rmu={"train": {"steps": 2}}, refusal_steps=2,
            refusal_strategies=["none", "remove"],
            classifier_noise_ps=[0.0, 0.2])


# --------------------------------------------------------------------------- pure pieces


def test_resolve_fills_only_unset_fields_from_the_preset():
    full = TF.resolve(TF.TokenFilteringConfig())
    assert full.sizes == TF.SCALES["full"]["sizes"] and full.tokens_per_param == 20.0
    assert full.pareto_size == TF.SCALES["full"]["pareto_size"] and full.pareto_size in full.sizes
    own = TF.resolve(TF.TokenFilteringConfig(sizes=["1x8", "1x16", "2x16"]))
    assert own.pareto_size == "1x16"  # sizes of one's own: the second largest
    quick = TF.resolve(TF.TokenFilteringConfig(quick=True, tokens_per_param=3.0))
    assert quick.sizes == TF.SCALES["quick"]["sizes"]
    assert quick.tokens_per_param == 3.0  # set explicitly: kept
    assert len(full.sizes) >= 4 and len(quick.sizes) >= 4  # the issue asks for at least four sizes
    with pytest.raises(ConfigError, match="pareto_size"):
        TF.resolve(TF.TokenFilteringConfig(sizes=["1x8", "1x16"], pareto_size="2x32"))
    with pytest.raises(ConfigError, match="at least two"):
        TF.resolve(TF.TokenFilteringConfig(sizes=["1x8"]))
    with pytest.raises(ConfigError, match="strategies"):
        TF.TokenFilteringConfig(strategies=["mask", "shuffle"])
    with pytest.raises(ConfigError, match="refusal_strategies"):
        TF.TokenFilteringConfig(strategies=["mask"], refusal_strategies=["none", "remove"])
    with pytest.raises(ConfigError, match="threshold"):
        TF.TokenFilteringConfig(threshold=1.5)
    assert full.noise_strategies == [full.pareto_token_strategy]  # the label-noise runs: filtering alone
    with pytest.raises(ConfigError, match="noise_strategies"):
        TF.TokenFilteringConfig(noise_strategies=["remove", "drop_document"])
    with pytest.raises(ConfigError, match="sgtm_mlp_share"):
        TF.TokenFilteringConfig(sgtm_mlp_share=1.0)
    # RMU's run takes the keys of `obliviate unlearn`'s unlearn.*, checked before any pretraining
    with pytest.raises(ConfigError, match=r"'rmu\.steps' is 'rmu\.train\.steps'"):
        TF.TokenFilteringConfig(rmu={"steps": 2})
    with pytest.raises(ConfigError, match=r"'rmu\.params\.nope'"):
        TF.TokenFilteringConfig(rmu={"params": {"nope": 1}})
    ucfg, _ = TF.rmu_run_config(TF.TokenFilteringConfig(rmu={"train": {"steps": 3}}, rmu_alpha=7.0))
    assert (ucfg.train.steps, ucfg.params["alpha"], ucfg.params["coef"]) == (3, 7.0, 20.0)


def test_pareto_dominance_by_hand():
    token = [(3.0, 2.0), (4.0, 2.5)]  # (forget loss, retain loss): forget higher is better, retain lower
    assert TF.dominated((2.9, 2.1), token)  # worse on both than (3.0, 2.0)
    assert TF.dominated((3.0, 2.0), token)  # equal counts as weakly dominated
    assert TF.dominated((3.5, 2.6), token)  # (4.0, 2.5) beats it on both
    assert not TF.dominated((4.5, 2.6), token)  # higher forget loss than any token point
    assert not TF.dominated((2.0, 1.9), token)  # lower retain loss than any token point
    assert not TF.dominated((1.0, 1.0), [])


def test_slowdowns_on_a_known_power_law():
    a, b = 2.0, -0.1

    def law(C):
        return math.exp(a) * C ** b

    runs = {}
    for size, C in (("s", 1e9), ("m", 1e10), ("l", 1e11)):
        runs[size] = {"none": {"flops": C, "loss": {"medicine": law(C)}},
                      # as good as an unfiltered model with 1/100 of the compute: slowdown 100 by construction
                      "remove": {"flops": C, "loss": {"medicine": law(C / 100)}}}
    fit, slow = TF.slowdowns(runs, ["s", "m", "l"], "medicine")
    assert fit[0] == pytest.approx(a) and fit[1] == pytest.approx(b)
    for size in runs:
        assert slow[size]["none"] == pytest.approx(1.0)
        assert slow[size]["remove"] == pytest.approx(100.0)
    # a loss that rises with compute has no slowdown
    flat = {s: {"none": {"flops": C, "loss": {"medicine": 1.0 + 0.1 * i}}}
            for i, (s, C) in enumerate((("s", 1e9), ("m", 1e10)))}
    fit, slow = TF.slowdowns(flat, ["s", "m"], "medicine")
    assert fit is None and slow["s"]["none"] is None


def test_baseline_rises_names_the_sizes_where_the_unfiltered_loss_goes_up():
    runs = {s: {"none": {"loss": {"medicine": L}}} for s, L in (("a", 3.0), ("b", 2.0), ("c", 2.5), ("d", 2.4))}
    assert TF.baseline_rises(runs, ["a", "b", "c", "d"], "medicine") == [("b", "c")]
    assert TF.baseline_rises(runs, ["a", "b", "d"], "medicine") == [("b", "d")]
    assert TF.baseline_rises(runs, ["a", "b"], "medicine") == []


def test_recovery_ratio_cases():
    assert TFC.recovery_ratio(1300, 100, 5000) == (13.0, "=")
    assert TFC.recovery_ratio(None, 250, 5000) == (20.0, ">=")  # removal not recovered: at least 5000/250
    assert TFC.recovery_ratio(1300, 0, 5000) == (None, "inf")
    assert TFC.recovery_ratio(0, 0, 5000) == (None, "equal")
    assert TFC.recovery_ratio(1300, None, 5000) == (None, "undefined")


# --------------------------------------------------------------------------- tiny end to end


@pytest.mark.heavy(8)
def test_tiny_recipe_end_to_end_and_resume(tmp_path, monkeypatch):
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    tiny = {**TINY, "noise_strategies": ["remove", "sgtm"]}  # SGTM beside removal on the same noisy flags
    cfg = from_dict(TF.TokenFilteringConfig, tiny)
    with threadpool_limits(1):
        m = TF.run(cfg, tmp_path, progress=False)
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["status"] == "complete"
    metrics = res["metrics"]
    report = (tmp_path / "report.md").read_bytes()  # the report the run wrote is the one --render-only writes
    render_only("token-filtering", tmp_path)
    assert (tmp_path / "report.md").read_bytes() == report
    for size in TINY["sizes"]:
        for s in ["none", "mask", "remove", "drop_document"]:
            assert "compute_slowdown" in metrics[size][s]
            assert metrics[size][s]["params"] > 0 and metrics[size][s]["tokens"] > 0
            v = metrics[size][s]
            assert v["flops"] == pytest.approx(6 * v["params"] * v["tokens"])
        if metrics["fit"]["forget"] is not None:  # the unfiltered models fit their own law up to its residual
            assert metrics[size]["none"]["compute_slowdown"] == pytest.approx(1.0, rel=0.5)
    assert metrics["1x16"]["none"]["params"] > metrics["1x8"]["none"]["params"]
    for s in ["mask", "remove", "drop_document", "rmu"]:
        assert "adversarial_tokens" in metrics[s]
        t = metrics[s]["adversarial_tokens"]
        assert t is None or 0 <= t <= metrics[s]["adversarial_budget_tokens"]
        half = metrics[s]["recovery_cost_tokens"]  # half the gap closes no later than all of it
        if metrics[s]["start_forget_loss"] <= metrics["adversarial"]["baseline_forget_loss"]:
            assert half is None  # nothing was lost: no recovery cost (issue #28's one definition)
        else:
            assert half is None and t is None or half is not None and (t is None or half <= t)
    assert metrics["1x8"]["none"]["flagged_fraction"] == 0.0
    assert metrics["1x8"]["remove"]["flagged_fraction"] == metrics["1x8"]["mask"]["flagged_fraction"]
    for k in ("precision", "recall", "f1"):
        assert 0.0 <= metrics["labels"]["weak_labels"][k] <= 1.0
    assert set(metrics["refusal"]) == {"none", "remove"}
    assert all(0.0 <= v["forget"] <= 1.0 for v in metrics["refusal"].values())
    assert [r["p"] for r in metrics["label_noise"]["rows"]] == [0.0, 0.2]
    assert {s: [r["p"] for r in rows] for s, rows in metrics["label_noise"]["by_strategy"].items()} == \
        {"remove": [0.0, 0.2], "sgtm": [0.0, 0.2]}
    assert "| sgtm |" in (tmp_path / "report.md").read_text()
    assert len(res["claims"]) == 6 and "SGTM" in res["claims"][5]["claim"]
    assert all(c["agreement"] in ("agrees", "disagrees", "not testable here") for c in res["claims"])
    assert "timings" in res and "seconds" not in json.dumps(metrics)
    report = (tmp_path / "report.md").read_text()
    assert "The paper's claims, and ours" in report and "7000x" in report
    for png in ("scaling.png", "pareto.png", "adversarial.png", "noise.png"):
        assert (tmp_path / png).stat().st_size > 0
    assert m["1x8"]["none"]["forget_loss"] == metrics["1x8"]["none"]["forget_loss"]

    # a rerun into the same directory trains nothing: every part is read back
    def boom(*a, **k):
        raise AssertionError("a finished part was recomputed")

    for fn in ("_labels", "_pretrain_run", "_finetune_curve", "_refusal", "_rmu"):
        monkeypatch.setattr(TF, fn, boom)
    (tmp_path / "results.json").unlink()
    with threadpool_limits(1):
        again = TF.run(cfg, tmp_path, progress=False)
    assert again["1x16"]["remove"]["compute_slowdown"] == pytest.approx(m["1x16"]["remove"]["compute_slowdown"])
    assert again["remove"]["adversarial_tokens"] == m["remove"]["adversarial_tokens"]
    assert "epochs" in metrics["1x8"]["none"] and metrics["fit"]["corpus_tokens"] > 0
    # ... and one with another config refuses the parts, naming the difference, and loses nothing
    before = sorted(p.name for p in (tmp_path / "parts").iterdir())
    with pytest.raises(ConfigError, match=r"another config \(differs in: adv_steps\)"):
        TF.run(from_dict(TF.TokenFilteringConfig, {**tiny, "adv_steps": TINY.get("adv_steps", 1) + 1}), tmp_path,
               progress=False)
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == before


def test_registered_and_reachable_from_the_cli():
    from obliviate.papers import available, get_recipe

    assert "token-filtering" in available()
    cls, fn, desc = get_recipe("token-filtering")
    assert cls is TF.TokenFilteringConfig and fn is TF.run and "filtering" in desc


@pytest.mark.slow
def test_quick_recipe_from_the_command_line(tmp_path):
    from obliviate.cli.main import main

    out = tmp_path / "tf"
    main(["reproduce", "token-filtering", "--out", str(out), "--quick", "--no-progress"])
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]
    sizes = TF.SCALES["quick"]["sizes"]
    for size in sizes:
        for s in ["none", "mask", "remove", "drop_document"]:
            assert "compute_slowdown" in m[size][s]
    for s in ["mask", "remove", "drop_document", "rmu"]:
        assert "adversarial_tokens" in m[s]
    assert res["config"]["quick"] is True and res["config"]["command"].startswith("obliviate")
    assert res["config"]["sizes"] == sizes
    assert res["config"]["tokens_per_param"] == TF.SCALES["quick"]["tokens_per_param"]
    # the unfiltered models improve with scale on the forget domain
    assert m[sizes[-1]]["none"]["forget_loss"] < m[sizes[0]]["none"]["forget_loss"]
    # token removal costs more on the forget domain than on the retain domain at the largest size
    assert m[sizes[-1]]["remove"]["forget_loss"] - m[sizes[-1]]["none"]["forget_loss"] > \
        m[sizes[-1]]["remove"]["retain_loss"] - m[sizes[-1]]["none"]["retain_loss"]
    assert np.isfinite(m["labels"]["token_classifier"]["weak"]["auroc"])


def test_dropping_every_document_leaves_the_untrained_model(tmp_path):
    import torch

    torch.set_num_threads(1)
    cfg = TF.resolve(from_dict(TF.TokenFilteringConfig, TINY))
    D = TF._data(cfg)
    n = len(D.train)
    labels = {"probs": [np.zeros(len(s), np.float32) for s in D.train.input_ids], "doc_probs": np.ones(n, np.float32)}
    r = TF._pretrain_run(cfg, D, labels, "pretrain/1x8/drop_document@0.5", "1x8", "drop_document", 0.5, 0.0,
                         tmp_path, False)
    assert r["steps"] == 0 and r["kept_documents"] == 0.0 and "note" in r
    # an untrained model predicts about uniformly: loss near log(vocabulary)
    assert r["loss"]["medicine"] == pytest.approx(math.log(len(D.tok)), rel=0.1)
    assert (tmp_path / "models" / "pretrain" / "1x8" / "drop_document@0.5" / "config.json").exists()
    # no document flagged by the same classifier at a threshold above every probability: all are kept
    r = TF._pretrain_run(cfg, D, {**labels, "doc_probs": np.full(n, 0.2, np.float32)}, "pretrain/1x8/drop_document@0.5",
                         "1x8", "drop_document", 0.5, 0.0, tmp_path, False)
    assert r["kept_documents"] == 1.0 and r["steps"] >= 1


def test_sgtm_run_trains_on_the_flags_and_ablates_what_they_trained(tmp_path):
    import torch

    from obliviate.train.sgtm import dedicated_masks

    torch.set_num_threads(1)
    cfg = TF.resolve(from_dict(TF.TokenFilteringConfig, TINY))
    D = TF._data(cfg)
    rng = np.random.default_rng(0)
    probs = [rng.random(len(s)).astype(np.float32) for s in D.train.input_ids]
    r = TF._pretrain_run(cfg, D, {"probs": probs}, "pretrain/1x16/sgtm@0.5", "1x16", "sgtm", 0.5, 0.0, tmp_path,
                         False)
    flags = np.concatenate([p >= 0.5 for p in probs])
    assert r["strategy"] == "sgtm" and r["steps"] >= 1 and r["flagged_fraction"] == pytest.approx(flags.mean())
    assert r["flops"] == pytest.approx(6 * r["params"] * r["tokens"]) and r["trained_token_fraction"] == 1.0
    model = TF.load_model(str(tmp_path / "models" / "pretrain" / "1x16" / "sgtm@0.5"))
    scfg = TF.sgtm_config(model, cfg)
    assert (scfg.heads, scfg.mlp_units) == (0, round(0.18 * 48))  # one 16-dim head: MLP units only
    params = dict(model.named_parameters())
    masks = dedicated_masks(model, scfg)
    assert masks and all(float(params[n].detach()[m].abs().sum()) == 0.0 for n, m in masks.items())  # ablated
    assert r["sgtm"]["ablated_share"] == pytest.approx(sum(int(m.sum()) for m in masks.values()) / r["params"])
    # every step runs a forward for the flagged targets and one for the others: about twice a plain run's
    assert r["sgtm"]["passes"]["forwards"] == 2 * r["steps"]


def test_sgtm_routes_exactly_the_loss_terms_that_masking_drops():
    f = [np.array([0, 1, 1, 0, 0, 1], bool), np.array([1, 0], bool)]
    assert [r.tolist() for r in TF.routed_marks(f, "target")] == [[0, 1, 1, 0, 0, 1], [1, 0]]
    # the input convention drops the loss of predicting the token after a flagged one
    assert [r.tolist() for r in TF.routed_marks(f, "input")] == [[0, 0, 1, 1, 0, 0], [0, 1]]


def test_the_sgtm_claim_reads_the_noisy_runs():
    def rows(*pts):
        return [{"p": p, "forget_loss": f, "retain_loss": q} for p, f, q in pts]

    filt = rows((0.0, 3.0, 1.0), (0.1, 2.0, 1.0), (0.3, 1.5, 1.0))
    claim = TFC.sgtm_under_noise({"size": "2x32", "by_strategy": {
        "remove": filt, "sgtm": rows((0.0, 3.0, 1.0), (0.1, 2.5, 1.0), (0.3, 2.0, 0.9))}})
    assert claim.agrees is True and "p=0.3: forget 2 vs 1.5" in claim.ours
    trade = TFC.sgtm_under_noise({"size": "2x32", "by_strategy": {
        "remove": filt, "sgtm": rows((0.0, 3.0, 1.2), (0.1, 2.5, 1.2), (0.3, 2.0, 1.2))}})
    assert trade.agrees is False and "a trade" in trade.sentence
    worse = TFC.sgtm_under_noise({"size": "2x32", "by_strategy": {
        "remove": filt, "sgtm": rows((0.0, 3.0, 1.0), (0.1, 1.9, 1.0), (0.3, 2.0, 1.0))}})
    assert worse.agrees is False and "below remove's at p=0.1" in worse.sentence
    assert TFC.sgtm_under_noise({"size": "2x32", "by_strategy": {
        "remove": filt[:1], "sgtm": filt[:1]}}).agrees is None  # no noise level above 0
    assert TFC.sgtm_under_noise({"size": "2x32", "rows": filt}) is None  # SGTM did not run
    # against the first filtering of the run's noise_strategies, whatever order results.json keeps them in
    mask = rows((0.0, 3.0, 1.0), (0.1, 3.0, 1.0), (0.3, 3.0, 1.0))
    by = {"mask": mask, "remove": filt, "sgtm": rows((0.0, 3.0, 1.0), (0.1, 2.5, 1.0), (0.3, 2.0, 0.9))}
    assert TFC.sgtm_under_noise({"size": "2x32", "by_strategy": by}, ["remove", "mask", "sgtm"]).agrees is True
    assert TFC.sgtm_under_noise({"size": "2x32", "by_strategy": by}, ["mask", "remove", "sgtm"]).agrees is False


def _fake_metrics(rm_start, rmu_start, t_rm, t_rmu, ref_none, ref_remove):
    cfg = to_dict(TF.resolve(TF.TokenFilteringConfig(sizes=["1x8", "1x16"])))
    m = {size: {s: {"compute_slowdown": sd, "params": 1000} for s in ["none", "mask", "remove", "drop_document"]}
         for size, sd in (("1x8", 2.0), ("1x16", 5.0))}
    m["remove"] = {"adversarial_tokens": t_rm, "adversarial_budget_tokens": 10_000, "start_forget_loss": rm_start}
    m["rmu"] = {"adversarial_tokens": t_rmu, "start_forget_loss": rmu_start, "loss_after_rmu": {"medicine": rmu_start}}
    m["adversarial"] = {"size": "1x16", "baseline_forget_loss": 1.0}
    m["pareto"] = {"size": "1x8", "document": [{}, {}], "documents_dominated": 2}
    m["refusal"] = {"none": {"forget": ref_none[0], "retain": ref_none[1]},
                    "remove": {"forget": ref_remove[0], "retain": ref_remove[1]}}
    m["labels"] = {"token_classifier": {"weak": {"auroc": 0.90}, "ground_truth": {"auroc": 0.93}},
                   "document_classifier": {}, "weak_labels": {"f1": 0.5}}
    return cfg, m


def test_claim_agreements_are_computed_from_the_numbers():
    cfg, m = _fake_metrics(3.0, 2.0, 1300, 100, (0.3, 0.0), (0.6, 0.05))
    claims = TFC.make_claims(cfg, m)  # Pareto, scale, RMU, refusal, weak labels
    assert [x.agrees for x in claims] == [True, True, True, True, True]  # 2/2; 2x -> 5x; 13x; 0.6 = 2 x 0.3; gap 0.03
    assert "13x fewer" in claims[2].ours
    # RMU that never raised the forget loss cannot be compared; removal that recovers faster disagrees
    assert TFC.make_claims(cfg, _fake_metrics(3.0, 0.9, 1300, 0, (0.3, 0), (0.6, 0))[1])[2].agrees is None
    # < 5% rise
    assert TFC.make_claims(cfg, _fake_metrics(3.0, 1.01, 1300, 100, (0.3, 0), (0.6, 0))[1])[2].agrees is None
    assert TFC.make_claims(cfg, _fake_metrics(3.0, 2.0, 100, 1300, (0.3, 0), (0.6, 0))[1])[2].agrees is False
    # removal never recovered within the budget: a lower bound, 10000 / 100 = 100x
    cl = TFC.make_claims(cfg, _fake_metrics(3.0, 2.0, None, 100, (0.3, 0), (0.6, 0))[1])[2]
    assert cl.agrees is True and "at least 100x" in cl.ours
    # an unfiltered baseline whose held-out loss rises with size (an overfit corpus): the scale claim is untestable
    cfg, m = _fake_metrics(3.0, 2.0, 1300, 100, (0.3, 0.0), (0.6, 0.05))
    m["1x8"]["none"].update(forget_loss=1.2, epochs=3.0)
    m["1x16"]["none"].update(forget_loss=1.5, epochs=40.0)
    m["fit"] = {"corpus_tokens": 1000, "baseline_rises": {"forget": [("1x8", "1x16")], "retain": []}}
    cl = TFC.make_claims(cfg, m)[1]
    assert cl.agrees is None and "1.2 at 1x8 (3 epochs) -> 1.5 at 1x16 (40 epochs)" in cl.sentence
    assert "Warning" in TFR._rises_warning(m) and TFR._rises_warning({"fit": {"baseline_rises": {}}}) == ""
    # refusal: 1.2x the baseline is short of 1.5x; 20 points more on the retain domain is not "normal"
    assert TFC.make_claims(cfg, _fake_metrics(3.0, 2.0, 1300, 100, (0.5, 0.0), (0.6, 0.0))[1])[3].agrees is False
    assert TFC.make_claims(cfg, _fake_metrics(3.0, 2.0, 1300, 100, (0.3, 0.0), (0.9, 0.2))[1])[3].agrees is False
