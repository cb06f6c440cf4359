"""`obliviate bench` on one method, full and LoRA: ratios are positive and LoRA keeps no reference copy."""

from obliviate.bench import BenchConfig, bench_table, run_bench


def test_bench_rmu_full_and_lora():
    m = run_bench(BenchConfig(methods=["rmu"], lora_methods=["rmu"], size="nano", batch_size=4, repeats=1,
                              warmup=1), progress=False)
    assert m["rmu"]["step_time_ratio"] > 0 and m["rmu"]["peak_mem_ratio"] > 0
    assert m["rmu"]["reference_copy"] is True
    assert m["rmu+lora"]["reference_copy"] is False
    # the adapter-disabled reference holds no parameters of its own: less memory than the full-copy run
    assert m["rmu+lora"]["peak_bytes"] < m["rmu"]["peak_bytes"]
    assert "rmu+lora" in bench_table(m)
