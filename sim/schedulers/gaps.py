"""Pooled inter-token gaps of a run, counted in log-spaced bins (as HdrHistogram does).

vLLM's ``bench serve`` reports inter-token latency (ITL) percentiles over every gap
between two consecutive streamed chunks of every successful request. A replica
advances identical decode steps in closed form (fast-forward), never visiting each
token, so the gaps are not kept one by one: each step of the decode cohort adds
(members that had a token already) gaps of that step's length, and a closed-form run
of steps adds, bin by bin, how many of its step lengths fall in each bin (O(bins
touched), not O(steps)). Exceptional gaps (the first token after a preemption's
recompute) are added one by one.

The hot path appends: single steps and linear runs (``LinearStepEnds``: four numbers)
are queued and binned together with numpy when many are pending or when a figure is
read; a run of measured steps (a list of ends) is binned at once, its lengths read at
the bins' edges (guessed as if linear, then bisected).

Bin k holds gaps in [LOW_S·GROWTH^k, LOW_S·GROWTH^(k+1)); a percentile reads its bin's
geometric middle, within half a bin (0.5%) of the true gap, clamped to the exact
shortest and longest gap recorded (so a run of equal gaps reads exactly). The count,
the sum (so the mean), the shortest and the longest gap are exact.

Only gaps of requests that arrived at or after ``measured_from_s`` (the warm-up's end)
are counted, as the other latencies leave the warm-up out.
"""
from __future__ import annotations

import math

import numpy as np

from sim.cost.steps import LinearStepEnds

LOW_S = 1e-6                          # the bottom of bin 0; shorter gaps count in bin 0
GROWTH = 1.01                         # a bin's upper edge over its lower: 1% wide
_LOG_GROWTH = math.log(GROWTH)
_LOG_LOW = math.log(LOW_S)
_PER_LOG = 1.0 / _LOG_GROWTH
_log = math.log
_MAX_PENDING = 4 * 4096               # pending runs (four numbers each) before binning them


def bin_of(gap_s: float) -> int:
    """The bin of a gap of ``gap_s`` seconds."""
    if gap_s <= LOW_S:
        return 0
    return int((math.log(gap_s) - _LOG_LOW) * _PER_LOG)


def bin_edge_s(k: int) -> float:
    """The lower edge of bin ``k``."""
    return _EDGES_S[k] if k < len(_EDGES_S) else LOW_S * GROWTH ** k


# the bins' edges from 1 us to past 1e5 s, looked up rather than raised to a power
_EDGES_S = [LOW_S * GROWTH ** k for k in range(2600)]


def _bins_of(gaps_s: np.ndarray) -> np.ndarray:
    """``bin_of`` of each gap."""
    k = (np.log(np.maximum(gaps_s, LOW_S)) - _LOG_LOW) * _PER_LOG
    return k.astype(np.int64)


class GapHistogram:
    __slots__ = ("measured_from_s", "counts", "_sum_s", "_min_s", "_max_s", "_runs")

    def __init__(self, measured_from_s: float = 0.0) -> None:
        self.measured_from_s = measured_from_s    # count requests arriving from then on
        self.counts: dict[int, int] = {}           # bin -> gaps
        self._sum_s = 0.0
        self._min_s = math.inf
        self._max_s = -math.inf
        # runs of steps not yet in the bins, flat: (first length, slope, steps, count)...;
        # binned together (numpy) when many or when read, so a step costs one append
        self._runs: list[float] = []

    def measured(self, arrival_s: float) -> bool:
        """Whether a request that arrived at ``arrival_s`` counts (after the warm-up)."""
        return arrival_s >= self.measured_from_s

    def add(self, gap_s: float, count: int = 1) -> None:
        """``count`` gaps of ``gap_s`` each."""
        runs = self._runs
        runs += (gap_s, 0.0, 1, count)
        if len(runs) > _MAX_PENDING:
            self._bin_runs()

    def add_steps(self, step_end_s, num_steps: int, count: int) -> None:
        """``count`` gaps of each of the first ``num_steps`` steps whose cumulative
        ends are ``step_end_s`` (``sim.cost.steps``' kinds): step i lasts
        ``step_s(i)``. Step lengths must not shrink along the run (a decode
        step reads one more KV token a sequence than the one before: every cost
        model's step grows with it); the steps in each bin are found at the bin's
        edges, so a run costs O(bins touched), not O(steps)."""
        runs = self._runs
        if num_steps == 1:
            runs += (step_end_s[0], 0.0, 1, count)
        elif type(step_end_s) is LinearStepEnds:
            runs += (step_end_s.first, step_end_s.slope, num_steps, count)
        else:                                 # measured steps: each one's length
            self._add_measured(step_end_s.step_s, num_steps, step_end_s[num_steps - 1],
                               count)
            return
        if len(runs) > _MAX_PENDING:
            self._bin_runs()

    def add_steps_after_first(self, step_end_s, num_steps: int, count: int) -> None:
        """``add_steps`` of steps 2 .. ``num_steps`` of a run (its first step's gaps were
        counted otherwise: a decoder that waited out a prefill-only step)."""
        if num_steps < 2:
            return
        if type(step_end_s) is LinearStepEnds:
            self._runs += (step_end_s.first + step_end_s.slope, step_end_s.slope,
                           num_steps - 1, count)
            if len(self._runs) > _MAX_PENDING:
                self._bin_runs()
            return
        step_s = step_end_s.step_s
        self._add_measured(lambda i: step_s(i + 1), num_steps - 1,
                           step_end_s[num_steps - 1] - step_end_s[0], count)

    def _add_measured(self, length, num_steps: int, total_s: float, count: int) -> None:
        """``count`` gaps of each of ``num_steps`` steps lasting ``length(i)`` (not
        shrinking along the run), ``total_s`` in all."""
        first = length(0)
        last = length(num_steps - 1)
        self._sum_s += total_s * count
        # bin_of, inlined: this runs once a fast-forward
        k = int((_log(first) - _LOG_LOW) * _PER_LOG) if first > LOW_S else 0
        edges = _EDGES_S
        upper = edges[k + 1] if k + 1 < len(edges) else bin_edge_s(k + 1)
        if last >= upper or (last < first and last < bin_edge_s(k)):
            self._spread(first, last, count, length, num_steps)
            return
        counts = self.counts
        counts[k] = counts.get(k, 0) + num_steps * count
        if first < self._min_s:
            self._min_s = first
        if last > self._max_s:
            self._max_s = last

    def _bin_runs(self) -> None:
        """Put the pending runs of linear steps in the bins, most (those within one bin)
        at once."""
        runs = self._runs
        if not runs:
            return
        first, slope, steps, count = np.array(runs, dtype=np.float64).reshape(-1, 4).T
        runs.clear()
        last = first + slope * (steps - 1)
        # end of step n - 1 (as LinearStepEnds gives it) = Σ of the run's lengths
        self._sum_s += float(np.sum((steps * first + slope * (steps * (steps - 1) / 2.0))
                                    * count))
        short, long = np.minimum(first, last), np.maximum(first, last)
        self._min_s = min(self._min_s, float(short.min()))
        self._max_s = max(self._max_s, float(long.max()))
        k0, k1 = _bins_of(short), _bins_of(long)
        one = k0 == k1
        bins, where = np.unique(k0[one], return_inverse=True)
        totals = np.bincount(where, weights=(steps * count)[one], minlength=len(bins))
        counts = self.counts
        for k, n in zip(bins.tolist(), totals.tolist()):
            counts[k] = counts.get(k, 0) + int(round(n))
        for i in np.flatnonzero(~one).tolist():
            f, d = float(first[i]), float(slope[i])
            self._spread(f, float(last[i]), int(count[i]),
                         lambda j, f=f, d=d: f + d * j, int(steps[i]))

    def _spread(self, first: float, last: float, count: int, length, num_steps: int) -> None:
        """``count`` gaps of each of ``num_steps`` steps, step i lasting ``length(i)``
        (``first`` up to ``last``), bin by bin."""
        counts = self.counts
        if last < first:                      # shrinking steps: one by one
            for i in range(num_steps):
                gap_s = length(i)
                k = bin_of(gap_s)
                counts[k] = counts.get(k, 0) + count
                self._min_s, self._max_s = min(self._min_s, gap_s), max(self._max_s, gap_s)
            return
        self._min_s, self._max_s = min(self._min_s, first), max(self._max_s, last)
        k0, k1 = bin_of(first), bin_of(last)
        done = 0                              # steps counted so far (the shortest first)
        per_s = (num_steps - 1) / (last - first) if last > first else 0.0
        for k in range(k0, k1):
            edge = bin_edge_s(k + 1)
            lo, hi = done, num_steps          # the first step at or past the edge, in [lo, hi]
            # guessed as if the lengths grew linearly (nearly so: one guess usually hits)
            guess = min(max(int((edge - first) * per_s) + 1, lo), hi)
            if guess > lo and length(guess - 1) >= edge:
                hi = guess - 1
            elif guess < hi and length(guess) < edge:
                lo = guess + 1
            else:
                lo = hi = guess
            while lo < hi:
                mid = (lo + hi) // 2
                if length(mid) < edge:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > done:
                counts[k] = counts.get(k, 0) + (lo - done) * count
                done = lo
        if done < num_steps:
            counts[k1] = counts.get(k1, 0) + (num_steps - done) * count

    # -- reading -----------------------------------------------------------------
    @property
    def num_gaps(self) -> int:
        self._bin_runs()
        return sum(self.counts.values())

    @property
    def sum_s(self) -> float:
        """The gaps' total, exactly."""
        self._bin_runs()
        return self._sum_s

    @property
    def max_s(self) -> float:
        self._bin_runs()
        return self._max_s

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0..100) as numpy's linear method reads the sorted
        gaps, each gap read as its bin's middle; None without gaps."""
        n = self.num_gaps
        if n == 0:
            return None
        rank = q / 100.0 * (n - 1)
        below = math.floor(rank)
        lo_value = self._value_at(below)
        frac = rank - below
        if frac == 0.0:
            return lo_value
        return lo_value + frac * (self._value_at(below + 1) - lo_value)

    def _value_at(self, index: int) -> float:
        """The gap at ``index`` (0-based) in sorted order, read as its bin's middle."""
        seen = 0
        for k in sorted(self.counts):
            seen += self.counts[k]
            if seen > index:
                middle = LOW_S * GROWTH ** (k + 0.5)
                return min(max(middle, self._min_s), self._max_s)
        return self._max_s
