"""`obliviate bench` on one method, full and LoRA: ratios are positive and LoRA keeps no reference copy."""

import pytest
import torch

from obliviate.recipes.bench.run import BenchConfig, bench_table, run_bench


def test_bench_rmu_full_and_lora():
    m = run_bench(BenchConfig(methods=["rmu"], lora_methods=["rmu"], size="nano", batch_size=4, repeats=1,
                              warmup=1, min_rounds=2, max_rounds=3, eval_speed=False,
                              logit_memory=False), progress=False)
    assert m["rmu"]["step_time_ratio"] > 0 and m["rmu"]["peak_mem_ratio"] > 0
    assert m["rmu"]["reference_copy"] is True and m["rmu"]["reference"].startswith("prefix 0..")  # RMU's layers only
    assert m["rmu+lora"]["reference_copy"] is False and m["rmu+lora"]["reference"] == "shared"
    # the adapter-disabled reference holds no parameters of its own: less memory than the full-copy run
    assert m["rmu+lora"]["peak_bytes"] < m["rmu"]["peak_bytes"]
    assert "rmu+lora" in bench_table(m)
    assert m["rmu"]["flop_bound"] > 0 and m["timing"]["rounds"] in (2, 3)


def test_interleaved_ratios_on_a_fake_clock():
    """The bench's own logic: on a clock that charges each step a known cost (plus noise, and a neighbouring job
    slowing one round down), ratios come out as the costs' ratios, the same computation twice comes out the same
    within the tolerance, and the order is shuffled round by round."""
    import random

    from obliviate.recipes.bench.run import interleaved_ratios

    now = [0.0]
    rng = random.Random(1)
    costs = {"plain": 1.0, "graddiff": 2.0, "simnpo": 2.0, "npo": 2.33}
    orders = []

    def step(name):
        def run():
            orders.append(name)
            slow = 3.0 if 20 <= len(orders) < 25 else 1.0  # a burst of load for a few steps
            now[0] += costs[name] * slow * (1 + rng.uniform(-0.02, 0.02))
        return run

    out = interleaved_ratios({n: step(n) for n in costs}, "plain", clock=lambda: now[0], wall=lambda: now[0],
                             min_rounds=7, max_rounds=40, tol=0.05)
    assert out["plain"]["ratio"] == 1.0 and out["npo"]["converged"]
    for n, c in costs.items():
        assert abs(out[n]["ratio"] - c) <= 0.05 * c, (n, out[n])
        assert out[n]["q1"] <= out[n]["ratio"] <= out[n]["q3"]
    assert abs(out["graddiff"]["ratio"] - out["simnpo"]["ratio"]) <= 0.05 * 2.0  # same computation, same number
    rounds = [tuple(orders[i:i + 4]) for i in range(0, len(orders), 4)]
    assert len(set(rounds)) > 1  # shuffled, not a fixed order a periodic disturbance could line up with


def test_flop_bound_counts_the_products_computed():
    from obliviate.recipes.bench.run import count_products, flop_bound

    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(5, 4)

    def step():
        net(x).sum().backward()

    # forward 5*4*8 + 5*8*3; backward: the first layer's weight gradient only (its input needs none),
    # the second's weight and input gradients
    assert count_products([net], step) == {"forward": 160 + 120, "backward": 160 + 2 * 120}
    net[0].weight.requires_grad_(False)
    net[0].bias.requires_grad_(False)
    # now nothing needs an input gradient at all: layer 2 computes its weight gradient only
    assert count_products([net], step) == {"forward": 280, "backward": 120}
    plain = {"forward": 280, "backward": 400}
    twice_and_a_frozen_forward = {"forward": 3 * 280, "backward": 2 * 400}
    assert flop_bound(twice_and_a_frozen_forward, plain) == pytest.approx(2 + 280 / 680)


def test_logit_memory_is_cut_to_the_labelled_share():
    from obliviate.recipes.bench.run import measure_logit_memory
    from obliviate.data import collate

    seqs = [list(range(1, 21)) for _ in range(4)]
    batch = collate(seqs, 0, label_mask=[[i >= 15 for i in range(20)] for _ in seqs])  # 5 of 20 tokens labelled
    m = measure_logit_memory(batch, vocab=8192, d_model=16)
    assert m["labelled_logits_bytes"] < m["full_logits_bytes"]
    assert m["memory_ratio"] <= 1.5 * m["labelled_share"] + 0.05  # the logits dominate what is saved


@pytest.mark.slow
def test_eval_speed_entry():
    from obliviate.recipes.bench.run import measure_eval_speed

    m = measure_eval_speed(BenchConfig(size="nano"), rounds=1)
    assert m["qa_examples_per_s"] > 0 and m["mcq_examples_per_s"] > 0 and m["n_mcq"] == 72
    pytest.importorskip("lm_eval")
    assert m["mcq_time_vs_lm_eval"] > 0
