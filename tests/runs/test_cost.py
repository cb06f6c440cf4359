"""What a run spent (:mod:`obliviate.runs.cost`, issue #56, item 8): one record per stage of passes, tokens and
seconds, their total, the controls' share of them (cached or not), the one line a run prints, and a method's share
of the oracle's pretraining."""

import pytest
import torch

from obliviate.models import tiny_llama
from obliviate.runs.cost import (CostRecord, cost_line, cost_lines, made_by, pass_flops, removal_shares,
                                stage_record)


def test_a_stage_counts_the_passes_and_tokens_of_its_models():
    model = tiny_llama(vocab_size=32, n_layer=2, d_model=16, n_head=2, seed=0)
    ids = torch.randint(0, 32, (3, 5), generator=torch.Generator().manual_seed(0))
    cost = CostRecord()
    with cost.stage("train", model):
        model(input_ids=ids).logits.sum().backward()  # one forward and one backward of 3 rows x 5 positions
        with torch.no_grad():
            model(input_ids=ids[:2])  # one forward of 2 x 5
    with cost.stage("evaluate", model, control=True) as extra:
        with torch.no_grad():
            model(input_ids=ids[:1, :4])  # 1 x 4
        extra["cached"] = False
    s = cost.stages
    assert {k: s["train"][k] for k in ("forwards", "backwards", "forward_tokens", "backward_tokens", "tokens")} == {
        "forwards": 2, "backwards": 1, "forward_tokens": 15 + 10, "backward_tokens": 15, "tokens": 40}
    assert (s["evaluate"]["forwards"], s["evaluate"]["tokens"], s["evaluate"]["control"]) == (1, 4, True)
    rec = cost.as_dict()
    assert rec["total"]["forwards"] == 3 and rec["total"]["tokens"] == 44
    assert rec["controls"]["tokens"] == 4 and rec["controls"]["cache"] == "miss"
    # each stage's seconds and the wall's are rounded to 1 ms on their own: the sum of 2 rounded stages may pass the
    # rounded wall by up to 1.5 ms
    assert rec["wall_seconds"] >= rec["total"]["seconds"] - 0.0015 - 1e-9 and rec["total"]["seconds"] >= 0


def test_the_controls_say_whether_the_cache_served_them():
    cost = CostRecord()
    cost.add("attack:model:relearn", {"forwards": 4, "backwards": 2, "forward_tokens": 40, "backward_tokens": 20}, 2.0)
    built = stage_record({"forwards": 10, "backwards": 10, "forward_tokens": 100, "backward_tokens": 100}, 30.0)
    cost.add("build:negative_control", None, 0.25, control=True, cached=True, built=built)
    rec = cost.as_dict()
    assert rec["controls"]["cache"] == "hit" and rec["controls"]["tokens"] == 0  # nothing spent here on them
    assert rec["total"] == {"forwards": 4, "backwards": 2, "forward_tokens": 40, "backward_tokens": 20, "tokens": 60,
                            "seconds": 2.25}
    assert rec["stages"]["build:negative_control"]["built"]["tokens"] == 200  # what it cost when it was built
    line = cost_line({**rec, "wall_seconds": 41.0})
    assert line == "cost: 6 forward+backward passes (4 forward, 2 backward), 60 tokens, 41.0 s (controls 0.2 s, cached)"
    cost.add("attack:base_model:relearn", {"forwards": 1000, "forward_tokens": 3_200_000}, 1.0, control=True)
    rec = cost.as_dict()
    assert rec["controls"]["cache"] == "partial" and "1,006 forward+backward passes" in cost_line(rec)
    assert "3.2M tokens" in cost_line(rec) and "partly cached" in cost_line(rec)


def test_a_stage_recorded_twice_adds_up():
    cost = CostRecord()
    cost.add("tune", {"forwards": 1, "forward_tokens": 5}, 1.0)
    cost.add("tune", {"forwards": 2, "forward_tokens": 7, "backwards": 1, "backward_tokens": 7}, 0.5)
    t = cost.stages["tune"]
    assert (t["forwards"], t["backwards"], t["tokens"], t["seconds"]) == (3, 1, 19, 1.5)


def test_a_share_of_the_oracles_pretraining_is_the_ratio_of_the_recorded_counts():
    """Forward plus backward tokens, and FLOPs N (2 forward + 4 backward tokens), of a method's unlearning and of a
    model made by a pretraining run (with the labelling run it records), each over the oracle's pretraining's: the
    shares are exactly the ratios of the integers recorded beside them."""
    n = 1_234_567
    spent = {"forwards": 8, "backwards": 4, "forward_tokens": 800, "backward_tokens": 400}
    pretraining = {"forwards": 100, "backwards": 100, "forward_tokens": 30_011, "backward_tokens": 30_011}
    filtered = {"forwards": 100, "backwards": 100, "forward_tokens": 33_003, "backward_tokens": 33_003}
    labelling = {"passes": {"forwards": 7, "backwards": 0, "forward_tokens": 901, "backward_tokens": 0},
                 "what": "a classifier over the corpus"}
    assert pass_flops(spent, n) == n * (2 * 800 + 4 * 400) and pass_flops(spent, None) is None
    removal = {"npo": made_by(spent, n, "its unlearning", "unlearn:npo"),
               "filtered": made_by(filtered, n, "its pretraining", "pretrain.json", extra=labelling),
               "edit": made_by({"forwards": 0}, n, "an edit", "unlearn:edit"),
               "lost": made_by(None, n, "no record", "unlearn:lost")}
    assert removal["filtered"]["tokens"] == 66_006 + 901 and removal["filtered"]["flops"] == n * (6 * 33_003 + 2 * 901)
    oracle = made_by(pretraining, n, "the oracle's pretraining", "oracle_pretraining")
    shares, flops = removal_shares(removal, oracle)
    for name in ("npo", "filtered"):
        assert shares[name] == removal[name]["tokens"] / oracle["tokens"], name
        assert flops[name] == removal[name]["flops"] / oracle["flops"], name
    assert shares["npo"] == 1200 / 60_022 and flops["npo"] == (2 * 800 + 4 * 400) / (6 * 30_011)
    assert shares["edit"] == 0.0 and shares["lost"] is None and flops["lost"] is None  # no record: n/a, not 0
    assert removal_shares(removal, None) == ({}, {}) and removal_shares(removal, {"tokens": 0}) == ({}, {})
    rec = {**CostRecord().as_dict(), "share_of_oracle_pretraining": {"npo": 0.02, "rmu": None},
           "share_of_oracle_pretraining_flops": {"npo": 0.025, "rmu": None},
           "oracle_pretraining": {"passes": pretraining, "what": "the oracle's pretraining"}}
    lines = cost_lines(rec)
    assert len(lines) == 2 and lines[1].endswith("npo 2% (FLOPs 2.5%), rmu n/a")
    assert "(60.0k forward+backward tokens; the oracle's pretraining)" in lines[1]


@pytest.mark.parametrize("shares", [{"npo": None, "rmu": None}, {}])
def test_an_unknown_pretraining_gives_the_reason_there_is_no_share_not_a_zero(shares):
    why = "unknown: the oracle was given (--oracle) and records no pretrain.json"
    rec = {**CostRecord().as_dict(), "share_of_oracle_pretraining": shares,
           "oracle_pretraining": {"passes": None, "what": why}}
    lines = cost_lines(rec)
    assert lines[1:] == [f"cost: no share of the oracle's pretraining: {why}"]  # never "(0 ... tokens): npo n/a"
    assert cost_lines({**CostRecord().as_dict(), "share_of_oracle_pretraining": {},
                       "oracle_pretraining": None}) == [cost_line(CostRecord().as_dict())]  # no oracle: no line
