"""Bench: data-filtering classifier throughput as a multiple of pretraining throughput (no timed assertion)."""

import pytest

from obliviate.pipelines.bench.run import BenchConfig, filtering_ratio, filtering_table, measure_filtering


def test_filtering_ratio_hand_computed():
    # 100k classifier tokens/s against 4k pretraining tokens/s: 25x, i.e. 1/25 = 4% of pretraining compute
    r = filtering_ratio(100_000, 4_000)
    assert r["throughput_ratio"] == pytest.approx(25.0)
    assert r["cost_fraction"] == pytest.approx(0.04)
    assert r["meets_target"] is True
    r = filtering_ratio(30_000, 2_000, target=20.0)  # 15x: 6.7% of pretraining, short of the 20x target
    assert r["throughput_ratio"] == pytest.approx(15.0)
    assert r["cost_fraction"] == pytest.approx(1 / 15)
    assert r["meets_target"] is False
    assert filtering_ratio(40, 2)["meets_target"] is True  # exactly 20x meets the target
    with pytest.raises(ValueError):
        filtering_ratio(0.0, 1.0)


def test_measure_filtering_reports_each_model_and_the_largest():
    cfg = BenchConfig(filtered_sizes=["1x8", "1x16"], classifier_layers=1, classifier_d=8,
                      classifier_window=4, repeats=1, warmup=0)
    f = measure_filtering(cfg)
    assert f["classifier"] == "biLM 1x8 + window 4"
    assert list(f["models"]) == ["1x8", "1x16"]
    assert f["filtered_model"] == "1x16"
    for v in f["models"].values():
        assert v["train_tokens_per_s"] > 0 and v["params"] > 0
        # the ratio is the classifier's throughput over this model's, whatever the timings were
        assert v["throughput_ratio"] == pytest.approx(f["classifier_tokens_per_s"] / v["train_tokens_per_s"])
    assert f["models"]["1x16"]["params"] > f["models"]["1x8"]["params"]
    assert f["throughput_ratio"] == f["models"]["1x16"]["throughput_ratio"]
    table = filtering_table({"filtering": f})
    assert "1x16" in table and "biLM 1x8" in table
    assert filtering_table({}) == ""
