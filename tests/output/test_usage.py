"""Pool usage bins: every run's busy time and tokens land in the bins it overlaps."""
from __future__ import annotations

import random

import pytest

from sim.recording.usage import PoolUsage


def overlap_by_bin(runs, interval_s: float, num_bins: int):
    busy, tokens = [0.0] * num_bins, [0.0] * num_bins
    for start, end, tok in runs:
        for b in range(num_bins):
            lo, hi = max(start, b * interval_s), min(end, (b + 1) * interval_s)
            if hi > lo:
                busy[b] += hi - lo
                tokens[b] += tok * (hi - lo) / (end - start)
    return busy, tokens


def test_runs_in_any_order_fill_the_bins_they_overlap_in_proportion():
    """Runs from many replicas end in near time order (most inside the latest bin),
    with some long ones that started bins earlier and a few out of order."""
    rng = random.Random(3)
    usage = PoolUsage(interval_s=1.0)
    runs, t = [], 0.0
    for _ in range(3000):
        t += rng.expovariate(400.0)
        length = rng.choice([0.002, 0.02, 0.3, 2.5]) * rng.random()
        start = max(0.0, t - length) if rng.random() > 0.05 else max(0.0, t - 4.0 * rng.random())
        tok = float(rng.randint(1, 500))
        usage.add(start, t, 1, 8, tok, 1e12, 1e9)
        runs.append((start, t, tok))
    num_bins = int(t) + 1
    busy, tokens, _ = usage.per_interval(num_bins, t)
    want_busy, want_tokens = overlap_by_bin(runs, 1.0, num_bins)
    assert list(busy) == pytest.approx(want_busy, rel=1e-9, abs=1e-12)
    assert list(tokens) == pytest.approx(want_tokens, rel=1e-9, abs=1e-9)
    assert usage.busy_total_s == pytest.approx(sum(e - s for s, e, _ in runs), rel=1e-12)
    assert usage.num_runs == 3000 and usage.tokens_total == sum(tok for *_, tok in runs)


def test_a_run_ending_exactly_on_a_bin_edge_goes_to_the_bin_it_covers():
    usage = PoolUsage(interval_s=10.0)
    usage.add(2.0, 5.0, 1, 1, 30.0, 0.0, 0.0)     # inside bin 0, which it then remembers
    usage.add(5.0, 10.0, 1, 1, 50.0, 0.0, 0.0)    # ends on the edge: all of it in bin 0
    usage.add(10.0, 12.0, 1, 1, 20.0, 0.0, 0.0)   # starts on the edge: bin 1
    busy, tokens, _ = usage.per_interval(2, 12.0)
    assert list(busy) == [8.0, 2.0] and list(tokens) == [80.0, 20.0]
