"""Spend budget per fixed period (e.g. dollars per day per team).

Spend is counted in fixed windows ``[k * period_s, (k + 1) * period_s)``
starting at time 0; the count starts afresh at each window boundary. A
spend that would exceed the limit is refused with the seconds until the
next window opens. :meth:`PeriodBudget.charge` records spend known only
later (the actual cost at completion) without checking, so a window may
overshoot its limit; every further try in that window is then refused.

Pure and deterministic: the caller passes ``now_s``, which must never go
backwards.
"""
from __future__ import annotations

import math

# Relative slack on "within the limit?", so sums of float costs that equal
# the limit on paper (0.1 + 0.2 against 0.3) are allowed.
_REL_TOL = 1e-9


class PeriodBudget:
    """At most ``limit`` spent per window of ``period_s`` seconds."""

    __slots__ = ("limit", "period_s", "_window", "_spent", "_last_s")

    def __init__(self, limit: float, period_s: float) -> None:
        if not (math.isfinite(limit) and limit >= 0):
            raise ValueError(f"limit must be finite and at least 0, got {limit}")
        if not (math.isfinite(period_s) and period_s > 0):
            raise ValueError(f"period_s must be finite and greater than 0, got {period_s}")
        self.limit = float(limit)
        self.period_s = float(period_s)
        self._window = 0
        self._spent = 0.0
        self._last_s = -math.inf

    def window_index(self, now_s: float) -> int:
        """k such that ``k * period_s <= now_s < (k + 1) * period_s`` (exact at boundaries)."""
        p = self.period_s
        k = math.floor(now_s / p)
        if k * p > now_s:          # float division rounded up across a boundary
            k -= 1
        elif (k + 1) * p <= now_s:  # ... or down
            k += 1
        return k

    def _roll(self, now_s: float) -> None:
        assert now_s >= self._last_s, f"time went backwards: {now_s} < {self._last_s}"
        self._last_s = now_s
        k = self.window_index(now_s)
        if k != self._window:
            self._window = k
            self._spent = 0.0

    def spent(self, now_s: float) -> float:
        """Spend recorded in the window holding ``now_s``."""
        self._roll(now_s)
        return self._spent

    def remaining(self, now_s: float) -> float:
        """What may still be spent in the current window (never below 0)."""
        self._roll(now_s)
        return max(0.0, self.limit - self._spent)

    def next_window_s(self, now_s: float) -> float:
        """Seconds from ``now_s`` until the next window opens (always > 0).

        ``now_s + next_window_s(now_s)`` is guaranteed to land in the next
        window despite float rounding.
        """
        start = (self.window_index(now_s) + 1) * self.period_s
        wait = start - now_s
        while now_s + wait < start:
            wait = math.nextafter(wait, math.inf)
        return wait

    def try_spend(self, now_s: float, amount: float) -> float:
        """Record ``amount`` at ``now_s`` if the window's limit allows it.

        Returns 0.0 when recorded; otherwise records nothing and returns the
        seconds until the next window opens (``inf`` if ``amount`` exceeds
        the limit, which no window can grant).
        """
        if not (math.isfinite(amount) and amount >= 0):
            raise ValueError(f"amount must be finite and at least 0, got {amount}")
        self._roll(now_s)
        if self._spent + amount <= self.limit * (1.0 + _REL_TOL):
            self._spent += amount
            return 0.0
        if amount > self.limit:
            return math.inf
        return self.next_window_s(now_s)

    def charge(self, now_s: float, amount: float) -> None:
        """Record ``amount`` in the window holding ``now_s`` without checking.

        The window may go over its limit. A negative amount hands back an
        over-reservation made earlier in the same window (spend never drops
        below 0).
        """
        if not math.isfinite(amount):
            raise ValueError(f"amount must be finite, got {amount}")
        self._roll(now_s)
        self._spent = max(0.0, self._spent + amount)

    def __repr__(self) -> str:
        return (f"PeriodBudget(limit={self.limit!r}, period_s={self.period_s!r}, "
                f"spent={self._spent!r} in window {self._window})")
