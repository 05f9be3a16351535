"""The monotone tables a calibrated profile holds, read as the cost model reads them.

:class:`Table`: [x, seconds] rows read in log-log space between neighbouring points;
below the first point the first point's time applies (zero work, zero time); past the
last point time grows in proportion to x (work). :class:`PerKeyTable`: an engine's
seconds per key read by the step's new tokens, linear in log new tokens. Both read a
whole array of steps at once (numpy) or one step in plain floats (the hot path).
"""
from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from sim.cost import libm
from sim.cost.shape import ArrayLike
from sim.cost.table_steps import PowerPieces

_MIN_SECONDS = 1e-9
_log, _exp = math.log, math.exp


class Table:
    """A monotone [x, seconds] table, read in log-log space (vectorised and scalar)."""

    __slots__ = ("xs", "ts", "_lx", "_lt", "_x_last", "_t_last", "_zero", "_pieces",
                 "_t_first", "_between")

    def __init__(self, rows: list[list[float]], where: str = "table") -> None:
        if not rows:
            raise ValueError(f"{where} is empty")
        try:
            xs = [float(r[0]) for r in rows]
            ts = [float(r[1]) for r in rows]
        except (TypeError, IndexError, ValueError):
            raise ValueError(f"{where} must be a list of [x, seconds] pairs") from None
        if any(x <= 0 for x in xs) or any(b <= a for a, b in zip(xs, xs[1:])):
            raise ValueError(f"{where}: x must be positive and strictly increasing")
        if any(t < 0 or not math.isfinite(t) for t in ts) or any(b < a for a, b in zip(ts, ts[1:])):
            raise ValueError(f"{where}: seconds must be finite, non-negative and non-decreasing")
        self.xs = np.array(xs)
        self.ts = np.array(ts)
        self._zero = ts[-1] <= 0
        self._lx = [math.log(x) for x in xs]
        self._lt = [math.log(max(t, _MIN_SECONDS)) for t in ts]
        self._x_last = xs[-1]
        self._t_last = ts[-1]
        # what ``scalar`` reads, worked out once: the time below the first point, and per
        # pair of neighbours (log x, log t, their differences) as it subtracts them
        lx, lt = self._lx, self._lt
        self._t_first = math.exp(lt[0])
        self._between = [None] + [(lx[i - 1], lt[i - 1], lt[i] - lt[i - 1], lx[i] - lx[i - 1])
                                  for i in range(1, len(lx))]
        # the power laws it is read as (``pieces``): constant below the first point, then
        # between each two points, then in proportion to x past the last
        slopes = [(t1 - t0) / (x1 - x0) for x0, x1, t0, t1 in
                  zip(self._lx, self._lx[1:], self._lt, self._lt[1:])]
        self._pieces = (PowerPieces([0.0], [0.0]) if self._zero else
                        PowerPieces([0.0] + xs, [0.0] + slopes + [1.0]))

    def pieces(self) -> PowerPieces:
        """The power laws t ∝ x^s that ``scalar`` reads, where each starts: a decode run
        sums them in closed form (``table_steps.py``)."""
        return self._pieces

    def __call__(self, x: ArrayLike) -> ArrayLike:
        x = np.asarray(x, dtype=np.float64)
        if self._zero:
            return np.zeros_like(x)
        inside = libm.exp(np.interp(libm.log(np.clip(x, self.xs[0], self._x_last)),
                                    self._lx, self._lt))
        beyond = self._t_last * x / self._x_last
        return np.where(x > 0, np.where(x > self._x_last, beyond, inside), 0.0)

    def scalar(self, x: float) -> float:
        if x <= 0 or self._zero:
            return 0.0
        if x >= self._x_last:
            return self._t_last * x / self._x_last
        lx = _log(x)
        i = bisect_right(self._lx, lx)
        if i == 0:
            return self._t_first
        x0, t0, dt, dx = self._between[i]
        return _exp(t0 + dt * (lx - x0) / dx)


class PerKeyTable:
    """Seconds per key read by new tokens in the step: linear in log new tokens between
    the points, the first point's below them, in proportion to new tokens past the last."""

    __slots__ = ("_lq", "_s", "_q_last", "_s_last", "active")

    def __init__(self, rows, where: str) -> None:
        rows = rows or []
        ok = isinstance(rows, list) and all(
            isinstance(r, (list, tuple)) and len(r) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r)
            for r in rows)
        if not ok:
            raise ValueError(f"{where} must be a list of [new tokens, seconds per key] pairs")
        qs, ss = [float(r[0]) for r in rows], [float(r[1]) for r in rows]
        if any(q < 1 for q in qs) or any(b <= a for a, b in zip(qs, qs[1:])):
            raise ValueError(f"{where}: new tokens must be >= 1 and strictly increasing")
        if any(v < 0 or not math.isfinite(v) for v in ss):
            raise ValueError(f"{where}: seconds per key must be finite and >= 0")
        self.active = any(v > 0 for v in ss)
        self._lq = [math.log(q) for q in qs] or [0.0]
        self._s = ss or [0.0]
        self._q_last = qs[-1] if qs else 1.0
        self._s_last = ss[-1] if ss else 0.0

    def scalar(self, new_tokens: float) -> float:
        if new_tokens > self._q_last:
            return self._s_last * new_tokens / self._q_last
        lq = math.log(max(new_tokens, 1.0))
        i = bisect_right(self._lq, lq)
        if i == 0:
            return self._s[0]
        if i == len(self._lq):
            return self._s[-1]
        x0, x1 = self._lq[i - 1], self._lq[i]
        return self._s[i - 1] + (self._s[i] - self._s[i - 1]) * (lq - x0) / (x1 - x0)

    def __call__(self, new_tokens: ArrayLike) -> ArrayLike:
        q = np.asarray(new_tokens, dtype=np.float64)
        inside = np.interp(libm.log(np.maximum(q, 1.0)), self._lq, self._s)
        return np.where(q > self._q_last, self._s_last * q / self._q_last, inside)
