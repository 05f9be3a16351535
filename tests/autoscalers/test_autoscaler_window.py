"""Sliding windows behind the autoscalers: step-function means, max, pruning
and TTFT percentiles."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.autoscalers.window import PercentileWindow, TimeWindow


def test_mean_weights_each_value_by_the_time_it_held():
    """2 holds on [0, 4), 6 from 4 on: over [0, 10] the mean is (2*4 + 6*6)/10."""
    w = TimeWindow(10.0)
    w.add(0.0, 2.0)
    w.add(4.0, 6.0)
    assert w.mean(10.0) == pytest.approx(4.4)
    assert w.mean(12.0) == pytest.approx((2 * 2 + 6 * 8) / 10)   # window [2, 12]
    assert w.mean(14.0) == pytest.approx(6.0)                     # only the 6 is left


def test_mean_uses_the_covered_span_when_shorter_than_the_window():
    """1 on [0, 2), 3 on [2, 4]: 4 s covered of a 10 s window, mean (2 + 6)/4."""
    w = TimeWindow(10.0)
    w.add(0.0, 1.0)
    w.add(2.0, 3.0)
    assert w.mean(4.0) == pytest.approx(2.0)


def test_mean_of_a_fresh_sample_is_its_value_and_empty_is_none():
    """No samples: None. A lone sample read at its own time: its value."""
    w = TimeWindow(5.0)
    assert w.mean(0.0) is None and w.max(0.0) is None
    w.add(3.0, 7.0)
    assert w.mean(3.0) == 7.0
    assert w.mean(5.0) == 7.0


def test_a_second_sample_at_the_same_time_replaces_the_first():
    """Two samples at t=0: the first held for no time, only 5 counts."""
    w = TimeWindow(5.0)
    w.add(0.0, 1.0)
    w.add(0.0, 5.0)
    assert w.mean(2.0) == 5.0
    assert len(w) == 1


def test_max_sees_values_that_held_at_some_time_in_the_window():
    """5 held on [0, 3): in the window [2, 12] it counts; in [3.5, 13.5] not."""
    w = TimeWindow(10.0)
    w.add(0.0, 5.0)
    w.add(3.0, 1.0)
    w.add(12.0, 2.0)
    assert w.max(12.0) == 5.0
    assert w.max(13.5) == 2.0


def test_old_samples_are_pruned():
    """Window 10 s, a sample every second up to t=100: the samples from 90 on
    are kept (the one at 90 covers the window start), 11 in all."""
    w = TimeWindow(10.0)
    for t in range(101):
        w.add(float(t), float(t))
    assert len(w) == 11
    # values 90..99 each held 1 s in [90, 100]
    assert w.mean(100.0) == pytest.approx(94.5)


def test_bad_inputs_are_errors():
    """Time going backwards, NaN values and non-positive lengths are rejected."""
    w = TimeWindow(10.0)
    w.add(5.0, 1.0)
    with pytest.raises(ValueError, match="time order"):
        w.add(4.0, 1.0)
    with pytest.raises(ValueError, match="finite"):
        w.add(6.0, math.nan)
    with pytest.raises(ValueError, match="> 0"):
        TimeWindow(0.0)
    with pytest.raises(ValueError, match="> 0"):
        PercentileWindow(-1.0)


def _brute_mean(samples, length_s, now_s):
    start = max(now_s - length_s, samples[0][0])
    if now_s <= start:
        return [v for t, v in samples if t <= now_s][-1]
    area = 0.0
    for i, (t, v) in enumerate(samples):
        end = samples[i + 1][0] if i + 1 < len(samples) else now_s
        lo, hi = max(t, start), min(end, now_s)
        if hi > lo:
            area += v * (hi - lo)
    return area / (now_s - start)


@settings(max_examples=150, deadline=None)
@given(length=st.integers(1, 20),
       steps=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 50)), min_size=1, max_size=60),
       lag=st.integers(0, 30))
def test_mean_and_max_match_a_brute_force_integral(length, steps, lag):
    """With pruning, mean and max equal those over every sample ever added."""
    w = TimeWindow(float(length))
    samples = []
    t = 0.0
    for gap, value in steps:
        t += gap
        w.add(t, float(value))
        samples.append((t, float(value)))
        assert w.mean(t) == pytest.approx(_brute_mean(samples, length, t))
    now = t + lag
    assert w.mean(now) == pytest.approx(_brute_mean(samples, length, now))
    start = now - length
    held = [v for i, (ts, v) in enumerate(samples)
            if (samples[i + 1][0] if i + 1 < len(samples) else math.inf) > start]
    assert w.max(now) == max(held)


def test_percentile_matches_numpy_linear_interpolation():
    """Values 1..10: p95 = 1 + 0.95*9 = 9.55 and the median 5.5, as numpy."""
    w = PercentileWindow(100.0)
    for t in range(10):
        w.add(float(t), float(t + 1))
    assert w.quantile(9.0, 0.95) == pytest.approx(9.55)
    assert w.quantile(9.0, 0.5) == pytest.approx(5.5)
    assert w.quantile(9.0, 0.95) == pytest.approx(np.percentile(np.arange(1, 11), 95))


def test_percentile_covers_only_the_window_including_its_start():
    """Window 5 s; 100 at t=0, 1 at t=3, 2 at t=6. At t=6 the window [1, 6]
    holds 1 and 2; at t=8 the window [3, 8] still holds the observation at 3."""
    w = PercentileWindow(5.0)
    w.add(0.0, 100.0)
    w.add(3.0, 1.0)
    w.add(6.0, 2.0)
    assert w.quantile(6.0, 1.0) == 2.0
    assert w.quantile(8.0, 0.0) == 1.0
    assert w.quantile(9.0, 0.0) == 2.0
    assert w.quantile(20.0, 0.5) is None
    assert len(w) == 0


def test_percentile_window_edge_cases():
    """Empty window: None; observations may share a time; q outside [0, 1] is an error."""
    w = PercentileWindow(5.0)
    assert w.quantile(0.0, 0.95) is None
    w.add(1.0, 4.0)
    w.add(1.0, 2.0)
    assert w.quantile(1.0, 0.0) == 2.0
    with pytest.raises(ValueError, match="between 0 and 1"):
        w.quantile(1.0, 95)
    with pytest.raises(ValueError, match="time order"):
        w.add(0.5, 1.0)
