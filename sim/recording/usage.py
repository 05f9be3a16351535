"""Busy time and work of a pool, accumulated into sampling-interval bins.

A replica reports each run of steps (start, end, tokens, FLOPs, bytes) once.
The totals feed summary.json; the bins give the exact busy fraction and
tokens/s of each time-series interval (a run spanning several intervals is
split in proportion to its overlap with each). Nothing is kept per step, so
memory does not grow with the number of steps simulated.
"""
from __future__ import annotations

import numpy as np


class PoolUsage:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.busy_s: list[float] = []
        self.tokens: list[float] = []
        self.busy_total_s = 0.0
        self.tokens_total = 0.0
        self.flops_total = 0.0
        self.bytes_total = 0.0
        self.max_seqs = 0
        self.num_runs = 0
        self.num_steps = 0
        # replica-seconds during which replicas could serve (ready or draining)
        self.serving_s: list[float] = []
        self._serving = 0
        self._serving_since_s = 0.0
        # the bin the latest run ended in, [start, end): most runs fall inside it
        self._bin = 0
        self._bin_start_s = 0.0
        self._bin_end_s = -1.0

    def _grow(self, last_bin: int) -> None:
        extra = last_bin + 1 - len(self.busy_s)
        if extra > 0:
            self.busy_s.extend([0.0] * extra)
            self.tokens.extend([0.0] * extra)
            self.serving_s.extend([0.0] * extra)

    def serving_changed(self, now_s: float, serving: int) -> None:
        """The number of replicas able to serve is ``serving`` from ``now_s`` on."""
        self._spread_serving(now_s)
        self._serving = serving

    def _spread_serving(self, now_s: float) -> None:
        start, count = self._serving_since_s, self._serving
        self._serving_since_s = now_s
        if count == 0 or now_s <= start:
            return
        w = self.interval_s
        b0, b1 = int(start // w), int(now_s // w)
        self._grow(b1)
        for b in range(b0, b1 + 1):
            lo, hi = max(start, b * w), min(now_s, (b + 1) * w)
            if hi > lo:
                self.serving_s[b] += count * (hi - lo)

    def add(self, start_s: float, end_s: float, num_steps: int, num_seqs: int, tokens: float,
            flops: float, bytes_: float) -> None:
        dur = end_s - start_s
        self.busy_total_s += dur
        self.tokens_total += tokens
        self.flops_total += flops
        self.bytes_total += bytes_
        self.num_runs += 1
        self.num_steps += num_steps
        if num_seqs > self.max_seqs:
            self.max_seqs = num_seqs
        if self._bin_start_s <= start_s and end_s < self._bin_end_s:
            b = self._bin
            self.busy_s[b] += dur
            self.tokens[b] += tokens
            return
        w = self.interval_s
        b0, b1 = int(start_s // w), int(end_s // w)
        if b1 >= len(self.busy_s):
            self._grow(b1)
        self._bin, self._bin_start_s, self._bin_end_s = b1, b1 * w, (b1 + 1) * w
        if b0 == b1 or dur <= 0:
            self.busy_s[b0] += dur
            self.tokens[b0] += tokens
            return
        rate = tokens / dur
        for b in range(b0, b1 + 1):
            lo, hi = max(start_s, b * w), min(end_s, (b + 1) * w)
            if hi > lo:
                self.busy_s[b] += hi - lo
                self.tokens[b] += rate * (hi - lo)

    def per_interval(self, num_bins: int, end_s: float) -> tuple[np.ndarray, ...]:
        """(busy seconds, tokens, serving replica-seconds) of bins 0..num_bins-1."""
        self._spread_serving(end_s)
        out = []
        for values in (self.busy_s, self.tokens, self.serving_s):
            arr = np.zeros(num_bins)
            n = min(num_bins, len(values))
            arr[:n] = values[:n]
            out.append(arr)
        return tuple(out)
