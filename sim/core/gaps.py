"""Pooled inter-token gaps of a run, counted in log-spaced bins (as HdrHistogram does).

vLLM's ``bench serve`` reports inter-token latency (ITL) percentiles over every gap
between two consecutive streamed chunks of every successful request. A replica
advances identical decode steps in closed form (fast-forward), never visiting each
token, so the gaps are not kept one by one: each step of the decode cohort adds
(members that had a token already) gaps of that step's length, and a closed-form run
of steps adds, bin by bin, how many of its step lengths fall in each bin (O(bins
touched), not O(steps)). Exceptional gaps (the first token after a preemption's
recompute) are added one by one.

Bin k holds gaps in [LOW_S·GROWTH^k, LOW_S·GROWTH^(k+1)); a percentile reads its bin's
geometric middle, within half a bin (0.5%) of the true gap, clamped to the exact
shortest and longest gap recorded (so a run of equal gaps reads exactly). The count,
the sum (so the mean), the shortest and the longest gap are exact.

Only gaps of requests that arrived at or after ``measured_from_s`` (the warm-up's end)
are counted, as the other latencies leave the warm-up out.
"""
from __future__ import annotations

import math

from sim.cost.steps import LinearStepEnds

LOW_S = 1e-6                          # the bottom of bin 0; shorter gaps count in bin 0
GROWTH = 1.01                         # a bin's upper edge over its lower: 1% wide
_LOG_GROWTH = math.log(GROWTH)
_LOG_LOW = math.log(LOW_S)


def bin_of(gap_s: float) -> int:
    """The bin of a gap of ``gap_s`` seconds."""
    if gap_s <= LOW_S:
        return 0
    return int((math.log(gap_s) - _LOG_LOW) / _LOG_GROWTH)


def bin_edge_s(k: int) -> float:
    """The lower edge of bin ``k``."""
    return LOW_S * GROWTH ** k


def _step_lengths(step_end_s):
    """Step i's length from cumulative ends (``LinearStepEnds``: first + slope·i)."""
    if type(step_end_s) is LinearStepEnds:
        first, slope = step_end_s.first, step_end_s.slope
        return lambda i: first + slope * i
    return lambda i: step_end_s[i] - step_end_s[i - 1] if i else step_end_s[0]


class GapHistogram:
    __slots__ = ("measured_from_s", "counts", "sum_s", "min_s", "max_s", "_lo_s", "_hi_s",
                 "_bin")

    def __init__(self, measured_from_s: float = 0.0) -> None:
        self.measured_from_s = measured_from_s    # count requests arriving from then on
        self.counts: dict[int, int] = {}           # bin -> gaps
        self.sum_s = 0.0
        self.min_s = math.inf
        self.max_s = -math.inf
        # the bin added to last, [lo, hi): most steps fall in it again, found without a log
        self._lo_s, self._hi_s, self._bin = math.inf, -math.inf, 0

    @property
    def num_gaps(self) -> int:
        return sum(self.counts.values())

    def measured(self, arrival_s: float) -> bool:
        """Whether a request that arrived at ``arrival_s`` counts (after the warm-up)."""
        return arrival_s >= self.measured_from_s

    def add(self, gap_s: float, count: int = 1) -> None:
        """``count`` gaps of ``gap_s`` each."""
        self.sum_s += gap_s * count
        if self._lo_s <= gap_s < self._hi_s:
            self.counts[self._bin] += count
            if gap_s < self.min_s:
                self.min_s = gap_s
            if gap_s > self.max_s:
                self.max_s = gap_s
            return
        self._add_in_bins(gap_s, gap_s, count, None, 1)

    def add_steps(self, step_end_s, num_steps: int, count: int) -> None:
        """``count`` gaps of each of the first ``num_steps`` steps whose cumulative
        ends are ``step_end_s`` (``LinearStepEnds`` or a list): step i lasts
        end(i) − end(i − 1). Step lengths must not shrink along the run (a decode
        step reads one more KV token a sequence than the one before: every cost
        model's step grows with it); the steps in each bin are found by bisection
        at the bin's edges, so a run costs O(bins touched · log steps)."""
        if num_steps == 1:
            first = last = end_s = step_end_s[0]
        elif type(step_end_s) is LinearStepEnds:
            first = step_end_s.first
            last = first + step_end_s.slope * (num_steps - 1)
            end_s = step_end_s.last_s if num_steps == step_end_s.n else step_end_s[num_steps - 1]
        else:
            first = step_end_s[0]
            end_s = step_end_s[num_steps - 1]
            last = end_s - step_end_s[num_steps - 2]
        self.sum_s += end_s * count
        if self._lo_s <= first and last < self._hi_s:
            # every step in the bin added to last (the usual case)
            self.counts[self._bin] += num_steps * count
            if first < self.min_s:
                self.min_s = first
            if last > self.max_s:
                self.max_s = last
            return
        self._add_in_bins(first, last, count, step_end_s, num_steps)

    def _add_in_bins(self, first: float, last: float, count: int, step_end_s,
                     num_steps: int) -> None:
        """The steps of ``add_steps`` (lasting ``first`` up to ``last``), bin by bin."""
        if first < self.min_s:
            self.min_s = first
        if last > self.max_s:
            self.max_s = last
        counts = self.counts
        k0, k1 = bin_of(first), bin_of(last)
        self._lo_s, self._hi_s, self._bin = bin_edge_s(k1), bin_edge_s(k1 + 1), k1
        if k0 == k1:
            counts[k1] = counts.get(k1, 0) + num_steps * count
            return
        length = _step_lengths(step_end_s)
        if last < first:                      # shrinking steps: one by one
            for i in range(num_steps):
                gap_s = length(i)
                k = bin_of(gap_s)
                counts[k] = counts.get(k, 0) + count
                self.min_s, self.max_s = min(self.min_s, gap_s), max(self.max_s, gap_s)
            return
        done = 0                              # steps counted so far (the shortest first)
        for k in range(k0, k1):
            edge = bin_edge_s(k + 1)
            lo, hi = done, num_steps          # the first step at or past the edge, in [lo, hi]
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

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0..100) as numpy's linear method reads the sorted
        gaps, each gap read as its bin's middle; None without gaps."""
        n = sum(self.counts.values())
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
                return min(max(middle, self.min_s), self.max_s)
        return self.max_s
