"""Compute-slowdown maths on a synthetic power law with a known answer."""

import math

import numpy as np
import pytest

from obliviate.errors import DataError
from obliviate.filtering.scaling import (
    compute_slowdown,
    equivalent_compute,
    fit_power_law,
    geometric_sizes,
    tokens_for,
    tokens_to_recover,
    training_flops,
)

A, B = 1.7, -0.08


def law(C):
    return math.exp(A) * C ** B


def test_fit_recovers_known_power_law():
    C = np.geomspace(1e12, 1e16, 5)
    a, b = fit_power_law(C, [law(c) for c in C])
    assert a == pytest.approx(A, abs=1e-9)
    assert b == pytest.approx(B, abs=1e-12)


def test_slowdown_of_a_point_on_the_law_at_a_tenth_of_the_compute_is_ten():
    fit = fit_power_law(np.geomspace(1e12, 1e16, 4), [law(c) for c in np.geomspace(1e12, 1e16, 4)])
    C_f = 3e14
    L_f = law(C_f / 10)  # the filtered model is as good as an unfiltered one with a tenth of the compute
    # by hand: log L_f = A + B log(C_f/10)  =>  C_eq = exp((log L_f - A)/B) = C_f/10  =>  slowdown 10
    assert equivalent_compute(fit, L_f) == pytest.approx(C_f / 10, rel=1e-9)
    assert compute_slowdown(fit, L_f, C_f) == pytest.approx(10.0, rel=1e-9)
    assert compute_slowdown(fit, law(C_f), C_f) == pytest.approx(1.0, rel=1e-9)  # no cost: slowdown 1


def test_fit_with_noise_is_least_squares():
    # three points off a line in log-log space: the fit is the ordinary least-squares line
    logC = np.array([0.0, 1.0, 2.0])
    logL = np.array([1.0, 0.0, 0.5])
    a, b = fit_power_law(np.exp(logC), np.exp(logL))
    # by hand: mean x = 1, mean y = 0.5, slope = sum((x-1)(y-0.5)) / sum((x-1)^2) = (-0.5 + 0) / 2 = -0.25
    assert b == pytest.approx(-0.25)
    assert a == pytest.approx(0.75)


def test_bad_inputs():
    with pytest.raises(DataError):
        fit_power_law([1.0, 1.0], [2.0, 3.0])
    with pytest.raises(DataError):
        fit_power_law([1.0, 2.0], [0.0, 3.0])
    with pytest.raises(DataError):
        compute_slowdown((1.0, 0.0), 2.0, 10.0)


def test_sizes_tokens_flops():
    assert geometric_sizes(1, 1000, 4) == [1, 10, 100, 1000]
    assert tokens_for(1_000_000) == 20_000_000
    assert tokens_for(50, ratio=2) == 100
    assert training_flops(1e6, 2e7) == pytest.approx(1.2e14)


def test_tokens_to_recover():
    curve = [(0, 3.0), (100, 2.5), (200, 1.9), (300, 1.7)]
    assert tokens_to_recover(curve, 2.0) == 200
    assert tokens_to_recover(curve, 3.0) == 0
    assert tokens_to_recover(list(reversed(curve)), 2.0) == 200  # order of points does not matter
    assert tokens_to_recover(curve, 1.0) is None
