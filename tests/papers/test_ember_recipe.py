"""``obliviate reproduce ember`` on a very small world and fake EMBER data (results contract, report, resume)."""

import json
import math

import pytest

from obliviate.errors import ConfigError
from obliviate.papers import render_only

SMALL_WORLD = ["pretrain.world.n_forget=3", "pretrain.world.n_holdout=1", "pretrain.world.n_retain=3",
               "pretrain.world.n_general=3", "pretrain.world.n_concept=3", "pretrain.world.n_toxic=4",
               "pretrain.model.size=nano", "pretrain.model.n_layer=2", "pretrain.model.vocab_size=400",
               "pretrain.batch_size=4", "pretrain.train.steps=20", "pretrain.train.warmup_steps=2"]
SMALL_METHODS = ["world_concept.methods=[rmu,snmf]", "world_concept.method_steps=2", "world_concept.K=16",
                 "world_concept.factor_max_iter=60", "world_concept.factor_patience=20",
                 "world_concept.deltas=[1,10]", "world_concept.relearn_epochs=1", "world_concept.relearn_batch_size=8",
                 "world_concept.runs.snmf.params.n_iter=10", "world_concept.runs.snmf.params.min_ratio=1.2",
                 "world_concept.runs.rmu.params.layer=1", "world_concept.runs.snmf.params.layers=[1]"]
SMALL_DATA = ["ember_data.n_concepts=1", "ember_data.vocab_size=300", "ember_data.n_layer=1", "ember_data.d_model=16",
              "ember_data.n_head=2", "ember_data.max_len=32", "ember_data.train_steps=3", "ember_data.batch_size=4",
              "ember_data.K=8", "ember_data.factor_max_iter=40", "ember_data.factor_patience=10",
              "ember_data.deltas=[1,10]", "ember_data.n_relearn=4", "ember_data.relearn_epochs=1",
              "ember_data.min_confidence=0.1"]


def fake_ember_data(root):
    """A two-concept EMBER directory in the released format (small)."""
    d = root / "ember"
    d.mkdir(parents=True)
    concepts = {"Quidditch": ["Quidditch players fly brooms over the pitch.",
                              "The Seeker chases the Snitch in Quidditch.",
                              "A Quidditch match ends when the Snitch is caught.", "Beaters hit Bludgers at players."],
                "Golf": ["Golfers hit the ball toward the hole.", "A golf course has eighteen holes.",
                         "The caddie carries the golf clubs.", "Par is the expected number of golf strokes."]}
    neutral = ["The river flows past the old mill.", "She studied chemistry at the university.",
               "The train arrived late in the evening.", "Farmers grow wheat in the valley.",
               "He painted the fence white.", "The library opens at nine."]
    mc = {"q": "Who?", "correct_answer": "a", "options": ["a", "b", "c", "d"]}
    splits = ("QA_train", "QA_test", "SimdomQA_train", "SimdomQA_test")
    files = {
        "concept_sentences.json": [{"concept": c, "sentences": s * 5} for c, s in concepts.items()],
        "neutral_sentences.json": [{"url": "u", "title": "t", "sentence": s} for s in neutral * 3],
        "mc_questions.json": {c: {s: [mc] for s in splits} for c in concepts},
        "open_questions.json": {c: {s: [{"q": "Who?", "a": "a"}] for s in splits} for c in concepts},
        "relearn_paragraphs.json": {c: {"RelearnParagraphs": [" ".join(s)] * 4} for c, s in concepts.items()},
        "coherency_prompts.json": {c: ["Tell me about it."] for c in concepts},
    }
    for name, obj in files.items():
        (d / name).write_text(json.dumps(obj))
    return root


def reproduce(argv):
    """Overrides first: argparse cannot take positional ``key=value`` items after ``--out DIR``."""
    from obliviate.cli.main import main

    opts = [a for a in argv if a.startswith("--")]
    i, options, overrides = 0, [], []
    while i < len(argv):
        if argv[i] in ("--out", "--seed", "--config"):
            options += argv[i:i + 2]
            i += 2
        elif argv[i].startswith("--"):
            options.append(argv[i])
            i += 1
        else:
            overrides.append(argv[i])
            i += 1
    assert opts == [a for a in options if a.startswith("--")]
    assert main(["reproduce", "ember", *overrides, "--no-progress", *options]) == 0


class KeepAll:
    """A judge that keeps every candidate: the tiny test world's 400-token BPE has no whole concept names."""

    def judge(self, feature_id, top_tokens, description=None):
        from obliviate.methods.ember import Judgement

        return Judgement(True, 1.0, "test: keep all")


@pytest.mark.heavy(7)
def test_recipe_results_report_and_resume(tmp_path, monkeypatch):
    import obliviate.papers.ember.run as recipe_mod

    monkeypatch.setattr(recipe_mod, "world_judge", lambda world, wc: KeepAll())
    data = fake_ember_data(tmp_path / "data")
    out = tmp_path / "ember"
    argv = ["--out", str(out), *SMALL_WORLD, *SMALL_METHODS, *SMALL_DATA, f"ember_data.data={data}"]
    reproduce(argv)
    res = json.loads((out / "results.json").read_text())
    assert res["status"] == "complete" and res["seed"] == 0
    report = (out / "report.md").read_bytes()  # the report the run wrote is the one --render-only writes
    render_only("ember", out)
    assert (out / "report.md").read_bytes() == report
    m = res["metrics"]
    rows = ["base", "ember", "rmu", "rmu+ember", "snmf", "snmf+ember"]
    assert set(m) == set(rows)
    for name in rows:
        r = m[name]
        for key in ("concept_acc", "similar_acc", "utility_acc", "coherence", "relearn_concept_acc",
                    "vocab_fraction_edited", "d_loss_exclusive", "d_loss_other", "d_loss_neutral"):
            assert key in r and math.isfinite(r[key]), (name, key)
        assert 0.0 <= r["relearn_concept_acc"] <= 1.0 and 0.0 <= r["coherence"] <= 1.0
        assert [p[0] for p in r["relearn_curve"]] == [0.0, 1.0]  # step 0 and after the one epoch
    assert m["base"]["coherence"] == 1.0 and m["base"]["d_loss_other"] == 0.0
    for name in ("base", "rmu", "snmf"):  # methods that edit no embedding
        assert m[name]["vocab_fraction_edited"] == 0.0 and m[name]["n_tokens_edited"] == 0
    # EMBER alone and every combination use the grid's delta and the same edited rows.
    grid = res["delta_grid"]
    assert [r["delta"] for r in grid["rows"]] == [1.0, 10.0] and grid["delta"] in (1.0, 10.0)
    assert m["ember"]["n_tokens_edited"] > 0 and grid["features"]
    for name in ("ember", "rmu+ember", "snmf+ember"):
        assert m[name]["delta"] == grid["delta"]
        assert m[name]["vocab_fraction_edited"] == m["ember"]["vocab_fraction_edited"]
        assert (m[name]["vocab_fraction_edited"] > 0) == (m[name]["n_tokens_edited"] > 0)
    # Real-data part on the fake concept: perplexities at every stage.
    (concept, r), = res["real_data"].items()
    assert concept == "Quidditch"
    for stage in ("base", "ember", "relearn_base", "relearn_ember"):
        assert r[stage]["concept_ppl"] > 1.0 and r[stage]["neutral_ppl"] > 1.0, stage
    assert "total_seconds" in res["timings"] and "total_seconds" not in m
    assert len(res["claims"]) == 3 and all(c["sentence"] for c in res["claims"])
    report = (out / "report.md").read_text()
    assert "Made by: `obliviate " in report and "Real EMBER concepts" in report
    assert "The paper's claims, and ours" in report and "rmu+ember" in report
    for png in ("relearn_bars.png", "delta_grid.png", "real_data_ppl.png"):
        assert (out / png).exists(), png
    assert (out / "parts" / "world" / "rmu+ember.json").exists()
    assert (out / "parts" / "data" / "quidditch.json").exists()

    # A rerun into the same directory reuses every finished piece.
    import obliviate.unlearning.engine as unlearn_mod

    def no_training(*a, **k):
        raise AssertionError("a finished piece was trained again")

    monkeypatch.setattr(unlearn_mod, "unlearn", no_training)
    monkeypatch.setattr(recipe_mod, "relearn_attack", no_training)
    reproduce(argv)
    res2 = json.loads((out / "results.json").read_text())
    assert res2["metrics"] == m and res2["real_data"] == res["real_data"]


def test_data_part_skipped_without_data(tmp_path):
    out = tmp_path / "ember"
    reproduce(["--out", str(out), "parts=[data]", f"ember_data.data={tmp_path / 'none'}"])
    res = json.loads((out / "results.json").read_text())
    assert res["metrics"] == {} and res["real_data"] == {}
    assert res["notes"]["data"].startswith("EMBER data not found")
    assert "Skipped: EMBER data not found" in (out / "report.md").read_text()
    assert all(c["agreement"] == "not testable here" for c in res["claims"])


def test_claims_agreements_hand_made():
    from obliviate.papers.ember import make_claims

    row = dict(concept_acc=0.3, relearn_concept_acc=0.8, vocab_fraction_edited=0.0, n_tokens_edited=0,
               d_loss_exclusive=0.0, d_loss_other=0.01, d_loss_neutral=0.0)
    rows = {"base": {**row, "concept_acc": 1.0},
            "ember": {**row, "vocab_fraction_edited": 0.001, "n_tokens_edited": 2, "d_loss_exclusive": 1.0,
                      "d_loss_other": 0.2, "d_loss_neutral": 0.0},
            "rmu": row, "rmu+ember": {**row, "relearn_concept_acc": 0.4, "n_tokens_edited": 2}}
    c1, c2, c3 = make_claims(["rmu"], rows, {})
    assert c1.agrees is True and "0.50" in c1.ours  # 0.4 / 0.8
    assert c2.agrees is True  # 0.1% <= 0.14%
    assert c3.agrees is True  # 0.2 <= 0.25 * 1.0
    rows["rmu+ember"]["relearn_concept_acc"] = 0.6  # ratio 0.75 > 0.65
    rows["ember"].update(vocab_fraction_edited=0.002, d_loss_other=0.3)
    c1, c2, c3 = make_claims(["rmu"], rows, {})
    assert (c1.agrees, c2.agrees, c3.agrees) == (False, False, False)
    assert "~180 tokens" in c2.sentence and "(1,000 tokens" in c2.sentence  # 2 tokens / 0.002
    rows["rmu+ember"]["n_tokens_edited"] = 0  # the judge kept nothing: EMBER did not run
    assert make_claims(["rmu"], rows, {})[0].agrees is None
    rows["rmu+ember"]["n_tokens_edited"] = 2
    rows["rmu"]["relearn_concept_acc"] = 0.35  # regained only 5 points: nothing to prevent
    rows["ember"]["d_loss_exclusive"] = 0.01
    c1, _, c3 = make_claims(["rmu"], rows, {})
    assert c1.agrees is None and c3.agrees is None


def test_quick_fills_defaults_only_and_config_errors():
    from obliviate.config import build_config
    from obliviate.papers.ember import EmberRecipeConfig, apply_quick

    cfg = build_config(EmberRecipeConfig, overrides=["world_concept.factor_max_iter=7"], base={"quick": True})
    q = apply_quick(cfg)
    assert q.world_concept.factor_max_iter == 7 and q.world_concept.deltas == [1.0, 10.0, 100.0]
    assert q.ember_data.n_concepts == 1 and cfg.ember_data.n_concepts == 3
    with pytest.raises(ConfigError, match="parts"):
        build_config(EmberRecipeConfig, overrides=["parts=[tofu]"])
    with pytest.raises(ConfigError, match="plain MLP methods"):
        build_config(EmberRecipeConfig, overrides=["world_concept.methods=[rmu+ember]"])
    with pytest.raises(ConfigError, match="not among the methods"):
        build_config(EmberRecipeConfig, overrides=["world_concept.runs.npo.train.steps=3"])
    with pytest.raises(ConfigError, match="heldout"):
        build_config(EmberRecipeConfig, overrides=["ember_data.heldout=1.5"])


def test_term_spans_whole_words_longest_first():
    from obliviate.papers.ember import term_spans

    (doc,) = term_spans(["Areith the Silent met Areithan at Loukvale."], ["Areith", "Areith the Silent", "Loukvale"])
    assert [(s, e) for s, e, _ in doc["spans"]] == [(0, 17), (34, 42)]  # "Areithan" is not a whole-word match


@pytest.mark.slow
def test_quick_recipe_runs(tmp_path):
    out = tmp_path / "quick"
    reproduce(["--out", str(out), "--quick"])
    res = json.loads((out / "results.json").read_text())
    assert {"base", "ember", "rmu", "rmu+ember", "snmf", "snmf+ember", "crisp", "crisp+ember"} <= set(res["metrics"])
    assert all("relearn_concept_acc" in r and "vocab_fraction_edited" in r for r in res["metrics"].values())
    assert len(res["claims"]) == 3


def test_footprint_labels_positions_that_read_or_predict_a_term():
    import numpy as np

    from obliviate.data import TokenDataset
    from obliviate.papers.ember import footprint

    # tokens: bos a T b c T T d (T = part of an exclusive term); the label of the loss at position i is label[i]
    none, one = 0, 1
    lab = np.array([one, none, one, none, none, one, one, none])  # bos copies the first token's label
    ds = TokenDataset([np.arange(8)], {"excl": [lab]}, {"excl": ["None", "1"]})
    out = footprint(ds).labels["excl"][0]
    # position 1 (a, read from bos): no; 2 (predicts T): yes; 3 (b, read from T): yes; 4 (c): no;
    # 5 (T): yes; 6 (T, read from T): yes; 7 (d, read from T): yes
    assert out[1:].tolist() == [0, 1, 1, 0, 1, 1, 1]
    assert ds.labels["excl"][0] is lab  # the input dataset is unchanged
