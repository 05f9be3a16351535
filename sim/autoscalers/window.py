"""Sliding time windows over metric samples, for the autoscaler policies.

``TimeWindow`` reads its samples as a step function: a value holds from
its own time until the next sample (the last one holds until "now"). Its
mean is the time-weighted average over ``[now - length, now]``, or over the
part of that span the samples cover when they start later. This is how a
gauge such as "requests in flight per replica" sampled every tick should be
averaged: a sample that held for 4 s weighs twice one that held for 2 s.

``PercentileWindow`` keeps point observations (one TTFT per completed
request) and answers quantiles over those made in ``[now - length, now]``.

Both keep their samples in a deque and drop those that can no longer reach
the window, so an add costs O(1) amortised and a query costs O(samples in
the window) (plus a sort for a quantile). Times passed to ``add`` and to
the queries must not go backwards: a query prunes what is older than its
own window.
"""
from __future__ import annotations

import math
from collections import deque


def _check_length(length_s: float) -> float:
    length_s = float(length_s)
    if not (math.isfinite(length_s) and length_s > 0):
        raise ValueError(f"window length must be a finite number of seconds > 0, got {length_s}")
    return length_s


def _check_value(value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"window samples must be finite numbers, got {value}")
    return value


class TimeWindow:
    """Time-weighted mean and max of a step function over the last ``length_s``."""

    def __init__(self, length_s: float) -> None:
        self.length_s = _check_length(length_s)
        self._samples: deque[tuple[float, float]] = deque()   # (time_s, value)

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, now_s: float, value: float) -> None:
        """The value is ``value`` from ``now_s`` until the next sample.

        A second sample at the same time replaces the first (it held for no
        time at all); a sample earlier than the last one is an error.
        """
        value = _check_value(value)
        samples = self._samples
        if samples:
            last_s = samples[-1][0]
            if now_s < last_s:
                raise ValueError(f"samples must arrive in time order: {now_s} after {last_s}")
            if now_s == last_s:
                samples.pop()
        samples.append((now_s, value))
        self._prune(now_s)

    def _prune(self, now_s: float) -> None:
        # keep the sample that covers the window start; drop every one before it
        start_s = now_s - self.length_s
        samples = self._samples
        while len(samples) >= 2 and samples[1][0] <= start_s:
            samples.popleft()

    def mean(self, now_s: float) -> float | None:
        """Time-weighted average over ``[now - length, now]``; None without samples.

        Only the covered span counts when the first sample is younger than
        the window. When that span has no length (the only sample is at
        ``now_s``) the mean is the value in force at ``now_s``.
        """
        samples = self._samples
        if not samples:
            return None
        self._prune(now_s)
        start_s = max(now_s - self.length_s, samples[0][0])
        span_s = now_s - start_s
        if span_s <= 0:
            return samples[-1][1]
        area = 0.0
        n = len(samples)
        for i in range(n):
            t_s, value = samples[i]
            end_s = samples[i + 1][0] if i + 1 < n else now_s
            lo_s = max(t_s, start_s)
            hi_s = min(end_s, now_s)
            if hi_s > lo_s:
                area += value * (hi_s - lo_s)
        return area / span_s

    def max(self, now_s: float) -> float | None:
        """Largest value in force at some time in ``[now - length, now]``; None if empty."""
        if not self._samples:
            return None
        self._prune(now_s)
        return max(value for _, value in self._samples)


class PercentileWindow:
    """Quantiles of the point observations made in the last ``length_s``."""

    def __init__(self, length_s: float) -> None:
        self.length_s = _check_length(length_s)
        self._obs: deque[tuple[float, float]] = deque()       # (time_s, value)

    def __len__(self) -> int:
        return len(self._obs)

    def add(self, now_s: float, value: float) -> None:
        """One observation at ``now_s``; several may share a time."""
        value = _check_value(value)
        obs = self._obs
        if obs and now_s < obs[-1][0]:
            raise ValueError(f"observations must arrive in time order: {now_s} after "
                             f"{obs[-1][0]}")
        obs.append((now_s, value))
        self._prune(now_s)

    def _prune(self, now_s: float) -> None:
        start_s = now_s - self.length_s
        obs = self._obs
        while obs and obs[0][0] < start_s:
            obs.popleft()

    def quantile(self, now_s: float, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the observations in ``[now - length, now]``.

        Linear interpolation between order statistics, as numpy's default
        ``"linear"`` method: position ``q * (n - 1)`` in the sorted values.
        None when the window holds no observation.
        """
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile must be between 0 and 1, got {q}")
        self._prune(now_s)
        if not self._obs:
            return None
        values = sorted(value for _, value in self._obs)
        pos = q * (len(values) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(values) - 1)
        return values[lo] + (values[hi] - values[lo]) * (pos - lo)
