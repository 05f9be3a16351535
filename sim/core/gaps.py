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


class GapHistogram:
    __slots__ = ("measured_from_s", "counts", "num_gaps", "sum_s", "min_s", "max_s")

    def __init__(self, measured_from_s: float = 0.0) -> None:
        self.measured_from_s = measured_from_s    # count requests arriving from then on
        self.counts: dict[int, int] = {}           # bin -> gaps
        self.num_gaps = 0
        self.sum_s = 0.0
        self.min_s = math.inf
        self.max_s = -math.inf

    def measured(self, arrival_s: float) -> bool:
        """Whether a request that arrived at ``arrival_s`` counts (after the warm-up)."""
        return arrival_s >= self.measured_from_s

    def add(self, gap_s: float, count: int = 1) -> None:
        """``count`` gaps of ``gap_s`` each."""
        k = bin_of(gap_s)
        counts = self.counts
        counts[k] = counts.get(k, 0) + count
        self.num_gaps += count
        self.sum_s += gap_s * count
        if gap_s < self.min_s:
            self.min_s = gap_s
        if gap_s > self.max_s:
            self.max_s = gap_s

    def add_steps(self, step_end_s, num_steps: int, count: int) -> None:
        """``count`` gaps of each of the first ``num_steps`` steps whose cumulative
        ends are ``step_end_s`` (``LinearStepEnds`` or a list): step i lasts
        end(i) − end(i − 1). Step lengths must not shrink along the run (a decode
        step reads one more KV token a sequence than the one before); the steps
        in each bin are found by bisection at the bin's edges."""
        if num_steps == 1:
            self.add(step_end_s[0], count)
            return
        first = getattr(step_end_s, "first", None)
        if first is not None:                 # LinearStepEnds: step i lasts first + slope·i
            slope = step_end_s.slope
            last = first + slope * (num_steps - 1)

            def length(i: int) -> float:
                return first + slope * i
        else:
            first = step_end_s[0]
            last = step_end_s[num_steps - 1] - step_end_s[num_steps - 2]

            def length(i: int) -> float:
                return step_end_s[i] - step_end_s[i - 1] if i else step_end_s[0]
        k0, k1 = bin_of(first), bin_of(last)
        counts = self.counts
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
        self.num_gaps += num_steps * count
        self.sum_s += float(step_end_s[num_steps - 1]) * count
        shortest, longest = (first, last) if first <= last else (last, first)
        if shortest < self.min_s:
            self.min_s = shortest
        if longest > self.max_s:
            self.max_s = longest

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
                return min(max(middle, self.min_s), self.max_s)
        return self.max_s
