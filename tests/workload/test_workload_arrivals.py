"""Statistical checks of the arrival processes (fixed seeds, so deterministic;
tolerances are ~4 sigma so they would also hold for almost any other seed)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.config.workload import StreamConfig
from sim.workload.arrivals import process_arrival_times
from sim.workload.rates import build_rate


def arrival(cfg: dict):
    return StreamConfig(arrival=cfg, prompt_tokens=1, output_tokens=1).arrival


def cv_of(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x))


@pytest.mark.parametrize("seed", [1, 2])
def test_poisson_constant_rate_count_and_cv(seed):
    rate_per_s, duration_s = 50.0, 2000.0
    times_s = process_arrival_times(arrival({"type": "poisson", "rate": rate_per_s}),
                                    np.random.default_rng(seed), 0.0, duration_s)
    expected = rate_per_s * duration_s
    assert abs(len(times_s) - expected) < 4 * math.sqrt(expected)
    assert np.all(np.diff(times_s) >= 0) and times_s[0] >= 0 and times_s[-1] < duration_s
    assert cv_of(np.diff(times_s)) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("seed", [3, 4])
def test_gamma_bursty_cv_and_rate(seed):
    rate_per_s, duration_s, cv = 100.0, 2000.0, 3.0
    times_s = process_arrival_times(arrival({"type": "gamma", "rate": rate_per_s, "cv": cv}),
                                    np.random.default_rng(seed), 0.0, duration_s)
    expected = rate_per_s * duration_s
    # A renewal count has variance ~ expected * cv^2.
    assert abs(len(times_s) - expected) < 4 * cv * math.sqrt(expected)
    assert cv_of(np.diff(times_s)) == pytest.approx(cv, rel=0.10)


def test_gamma_smooth_is_less_variable_than_poisson():
    times_s = process_arrival_times(arrival({"type": "gamma", "rate": 10, "cv": 0.25}),
                                    np.random.default_rng(5), 0.0, 5000.0)
    assert cv_of(np.diff(times_s)) == pytest.approx(0.25, rel=0.05)


def test_gamma_is_stationary_from_the_window_start():
    """Burstiness must not pile arrivals at t=0: across many short windows the
    mean count in the first second equals the rate."""
    cfg = arrival({"type": "gamma", "rate": 2.0, "cv": 3.0})
    rng = np.random.default_rng(6)
    counts = [np.sum(process_arrival_times(cfg, rng, 0.0, 10.0) < 1.0) for _ in range(4000)]
    # Count variance in a 1 s window is at most ~rate*cv^2 (+ clustering), use a loose bound.
    assert np.mean(counts) == pytest.approx(2.0, abs=4 * math.sqrt(2.0 * 9 / 4000) + 0.05)


def test_piecewise_counts_per_segment():
    points = [[0, 2.0], [100, 10.0], [300, 0.0], [400, 5.0]]
    duration_s = 600.0
    times_s = process_arrival_times(
        arrival({"type": "poisson", "rate": {"type": "piecewise", "points": points}}),
        np.random.default_rng(7), 0.0, duration_s)
    edges = [p[0] for p in points] + [duration_s]
    counts, _ = np.histogram(times_s, bins=edges)
    for (t0, rate), t1, count in zip(points, edges[1:], counts):
        expected = rate * (t1 - t0)
        if expected == 0:
            assert count == 0
        else:
            assert abs(count - expected) < 4 * math.sqrt(expected), (t0, count, expected)


def test_sinusoidal_high_and_low_half_periods():
    mean, amp, period_s, n_periods = 20.0, 15.0, 100.0, 20
    times_s = process_arrival_times(
        arrival({"type": "poisson", "rate": {"type": "sinusoidal", "mean": mean,
                                             "amplitude": amp, "period": period_s}}),
        np.random.default_rng(8), 0.0, period_s * n_periods)
    phase = np.mod(times_s, period_s)
    high = np.sum(phase < period_s / 2)  # sin > 0 on the first half
    low = len(times_s) - high
    extra = amp * period_s / math.pi      # integral of the sine over half a period
    exp_high = n_periods * (mean * period_s / 2 + extra)
    exp_low = n_periods * (mean * period_s / 2 - extra)
    assert abs(high - exp_high) < 4 * math.sqrt(exp_high)
    assert abs(low - exp_low) < 4 * math.sqrt(exp_low)


def test_window_and_rate_scale():
    cfg = arrival({"type": "poisson", "rate": 10})
    times_s = process_arrival_times(cfg, np.random.default_rng(9), 500.0, 1500.0,
                                    rate_scale=3.0)
    assert times_s.min() >= 500.0 and times_s.max() < 1500.0
    assert abs(len(times_s) - 30000) < 4 * math.sqrt(30000)
    assert len(process_arrival_times(cfg, np.random.default_rng(9), 5.0, 5.0)) == 0


@pytest.mark.parametrize("rate_cfg", [
    3.5,
    {"type": "piecewise", "points": [[0, 2.0], [10, 0.0], [25, 4.0], [30, 0.5]]},
    {"type": "sinusoidal", "mean": 4.0, "amplitude": 4.0, "period": 7.0, "phase": -2.0},
])
def test_inverse_cumulative_rate_round_trips(rate_cfg):
    rate = build_rate(arrival({"type": "poisson", "rate": rate_cfg}).rate, rate_scale=1.5)
    t_s = np.linspace(0.0, 100.0, 2001)
    back_s = rate.time_at_cumulative(rate.cumulative(t_s))
    # Exact except inside zero-rate stretches, where Λ is flat and the inverse
    # returns the start of the next positive stretch's preimage.
    rate_here = rate.rate_per_s(t_s)
    assert np.allclose(rate.cumulative(back_s), rate.cumulative(t_s), atol=1e-6)
    assert np.allclose(back_s[rate_here > 0.5], t_s[rate_here > 0.5], atol=2e-3)
    # Numerically integrating the rate gives the cumulative.
    fine_s = np.linspace(0.0, 100.0, 200001)
    numeric = np.concatenate(([0.0], np.cumsum(rate.rate_per_s(fine_s[:-1]) * np.diff(fine_s))))
    assert np.allclose(numeric[::100], rate.cumulative(t_s), rtol=1e-3, atol=1e-2)


def test_piecewise_rate_that_ends_gives_no_late_arrivals():
    cfg = arrival({"type": "poisson", "rate": {"type": "piecewise",
                                               "points": [[0, 5.0], [50, 0.0]]}})
    times_s = process_arrival_times(cfg, np.random.default_rng(10), 0.0, 1000.0)
    assert len(times_s) > 0 and times_s.max() < 50.0
