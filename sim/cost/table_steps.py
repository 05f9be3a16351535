"""Step ends of a decode run priced by a measured table, without visiting each step.

Step i of a fast-forwarded decode run reads x_i = x_0 + i·d keys (every sequence
grows by one a step) and lasts

    step_i = max(floor, fixed + scale · table(x_i) + per_key · x_i)

The table is read in log-log space (``calibrated.Table``): between two neighbouring
points it is a power law, table(x) = table(a)·(x/a)^s; below its first point a
constant (s = 0), past its last one a line through zero (s = 1). So a run is, piece by
piece of the table, a sum of a power law over an arithmetic series of keys, which
has no elementary closed form (it is a difference of Hurwitz zeta functions) unless
s is 0 or 1. It is summed by Euler–Maclaurin:

    Σ_{k<m} (1 + k·r)^s = ((1 + m·r)^(s+1) − 1) / (r·(s + 1)) − ((1 + m·r)^s − 1) / 2
                          + Σ_{j=1..4} B_2j/(2j)! · r^(2j−1) · s(s−1)…(s−2j+2)
                                        · ((1 + m·r)^(s−2j+1) − 1) + R

with r = d/a. While the derivatives of orders 10 and 12 keep one sign (s < 10) the
remainder R is at most the first term left out (j = 5); once a step reads at least
``NEAR_KEYS`` times the keys a step adds (r ≤ 1/32) that bound is below 1e-16 of the
sum for every s < 10 (about 1e-18 at s = 0.5), the float rounding of the sum itself. Steps
nearer the origin, a piece whose bound is not met and a few steps are summed one by one,
each step read from the table as a single step is. A run's end times therefore equal
the per-step sum (``exact_steps``, ``np.cumsum`` of ``decode_run_s``) up to float
rounding (tests/cost/test_table_steps.py checks 1e-12 relative), while building one
costs O(table pieces the run crosses) and reading an end O(1).
"""
from __future__ import annotations

import math
from bisect import bisect_right

from sim.cost.steps import count_true

# B_2j/(2j)! for j = 1..4, and |B_10|/10!: the remainder's bound
_BERNOULLI = (1.0 / 12.0, -1.0 / 720.0, 1.0 / 30240.0, -1.0 / 1209600.0)
_BERNOULLI_NEXT = 1.0 / 47900160.0
_REL_BOUND = 1e-16                 # the remainder's bound allowed, relative to the sum


def _falling(s: float, q: int) -> float:
    """s·(s − 1)·…·(s − q + 1)."""
    out = 1.0
    for j in range(q):
        out *= s - j
    return out


class PowerPieces:
    """A table as the power laws it is read as: piece j starts at ``starts[j]`` keys
    (increasing, the first 0) and grows as x^``exponents[j]``; its Euler–Maclaurin
    coefficients B_2j/(2j)!·s(s−1)…(s−2j+2), j = 1..4 (``coefs[j]``), hold for a step
    whose keys added per step over its keys (r) is at most ``r_max[j]``.

    The remainder after them is at most |B_10/10!·s(s−1)…(s−8)|·r^9·|(1 + m·r)^(s−9) − 1|
    while 0 <= s <= 9 (the derivatives of orders 10 and 12 then keep one sign), and the
    last factor is below 1 and the sum at least m >= 1: r_max keeps the bound under
    ``_REL_BOUND`` of the sum (infinite where s(s−1)…(s−8) = 0: the sum is a polynomial's,
    exact); a piece with s outside [0, 9] is summed step by step (r_max 0)."""

    __slots__ = ("starts", "exponents", "coefs", "r_max")

    def __init__(self, starts: list[float], exponents: list[float]) -> None:
        self.starts, self.exponents = starts, exponents
        self.coefs: list[tuple[float, float, float, float]] = []
        self.r_max: list[float] = []
        for s in exponents:
            self.coefs.append(tuple(b * _falling(s, q) for b, q in zip(_BERNOULLI, (1, 3, 5, 7))))
            worst = _BERNOULLI_NEXT * abs(_falling(s, 9))
            self.r_max.append(0.0 if not 0.0 <= s <= 9.0 else
                              math.inf if worst == 0.0 else (_REL_BOUND / worst) ** (1.0 / 9.0))


def power_series_sum(s: float, r: float, m: int, coef: tuple[float, float, float, float]
                     ) -> float:
    """Σ_{k<m} (1 + k·r)^s by Euler–Maclaurin (``PowerPieces``' coefficients)."""
    log_end = math.log1p(m * r)
    em1 = math.expm1
    c1, c3, c5, c7 = coef
    total = em1((s + 1.0) * log_end) / (r * (s + 1.0)) - 0.5 * em1(s * log_end)
    if c1 != 0.0:
        total += c1 * r * em1((s - 1.0) * log_end)
        r2 = r * r
        if c3 != 0.0:
            r3 = r * r2
            total += c3 * r3 * em1((s - 3.0) * log_end)
            if c5 != 0.0:
                total += c5 * r3 * r2 * em1((s - 5.0) * log_end)
                if c7 != 0.0:
                    total += c7 * r3 * r2 * r2 * em1((s - 7.0) * log_end)
    return total


class _Piece:
    """The steps ``k0 .. k1 - 1`` of a run (after its lead) in one table piece: the first
    of them summed one by one (``head_ends``: their running sums), the rest as a power
    law of exponent ``s`` from the step after them (table value ``t_a``, r = d / x)."""

    __slots__ = ("k0", "s", "head_ends", "t_a", "r", "coef", "before")

    def __init__(self, k0, s, head_ends, t_a, r, coef, before) -> None:
        self.k0, self.s = k0, s
        self.head_ends, self.t_a, self.r, self.coef = head_ends, t_a, r, coef
        self.before = before          # Σ table over the run's steps before k0

    def sum(self, count: int) -> float:
        """Σ table over the piece's first ``count`` steps."""
        head_ends = self.head_ends
        head = len(head_ends)
        if count <= head:
            return head_ends[count - 1] if count else 0.0
        done = head_ends[-1] if head else 0.0
        if self.t_a == 0.0:
            return done
        return done + self.t_a * power_series_sum(self.s, self.r, count - head, self.coef)


class TableRunEnds:
    """Cumulative end offsets of a decode run's steps (``step_i`` above) in closed form:
    ``len``, ``[i]``, ``count_before`` as ``StepEnds`` has them, and each step's own
    length (``step_s``), read from the table as one step is.

    ``table`` gives ``scalar(x)`` and ``pieces()`` (its ``PowerPieces``)."""

    __slots__ = ("n", "last_s", "_fixed", "_scale", "_per_key", "_x_run", "_x0", "_d",
                 "_value", "_pieces", "_starts", "_floor", "_lead", "_first_s", "_last_step_s",
                 "_memo", "_step_memo")

    def __init__(self, table, fixed_s: float, scale: float, per_key_s: float,
                 kv_first: float, kv_per_step: float, num_steps: int,
                 floor_s: float | None = None) -> None:
        n = self.n = num_steps
        self._fixed, self._scale, self._per_key = fixed_s, scale, per_key_s
        self._d = kv_per_step
        self._value = table.scalar
        self._x_run = kv_first                # the keys of the run's first step
        self._last_step_s = None
        self._step_memo = (-1, 0.0)          # the step length read last: (index, seconds)
        first_t = self._value(kv_first)
        first = (fixed_s + scale * first_t) + kv_first * per_key_s
        lead = 0
        if floor_s is not None and first < floor_s:
            # steps grow along the run: those shorter than the floor come first, and last it
            lead = self._steps_below(floor_s)
            first = floor_s
        else:
            floor_s = None
        self._floor, self._lead, self._first_s = floor_s, lead, first
        self._x0 = kv_first + lead * kv_per_step      # the first step after them
        total = self._build(table.pieces(), n - lead, None if lead else first_t)
        m = n - lead
        keys = m * self._x0 + kv_per_step * (m * (m - 1) / 2.0)
        self.last_s = (lead * floor_s if lead else 0.0) + (
            m * fixed_s + scale * total + per_key_s * keys)
        self._memo = (n - 1, self.last_s)          # the end read last: (index, seconds)

    # -- building ------------------------------------------------------------------------
    def _steps_below(self, floor_s: float) -> int:
        """How many of the run's first steps are shorter than ``floor_s`` (bisected: step
        lengths do not shrink)."""
        lo, hi = 1, self.n
        if self._own_s(hi - 1) < floor_s:
            return hi
        while lo < hi:
            mid = (lo + hi) // 2
            if self._own_s(mid) < floor_s:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _build(self, table: PowerPieces, m_total: int, first_t: float | None) -> float:
        """The run's pieces after the lead (``first_t``: the table at its first step, if
        known); returns Σ table over all its steps."""
        x0, d = self._x0, self._d
        pieces: list[_Piece] = []
        run_starts: list[int] = []
        before = 0.0
        if m_total > 0:
            x_last = x0 + (m_total - 1) * d
            starts = table.starts
            last_j = len(starts) - 1
            j = max(bisect_right(starts, x0) - 1, 0)
            k0 = 0
            while k0 < m_total:
                if j < last_j and starts[j + 1] <= x_last:
                    # the first step at or past the next piece's first x
                    k1 = min(max(math.ceil((starts[j + 1] - x0) / d), k0), m_total)
                else:
                    k1 = m_total
                if k1 > k0:
                    piece = self._piece(table, j, k0, k1, before, first_t)
                    before = piece.before + piece.sum(k1 - k0)
                    pieces.append(piece)
                    run_starts.append(k0)
                    k0 = k1
                j += 1
        self._pieces = pieces
        self._starts = run_starts
        return before

    def _piece(self, table: PowerPieces, j: int, k0: int, k1: int, before: float,
               first_t: float | None) -> _Piece:
        x0, d, value = self._x0, self._d, self._value
        m = k1 - k0
        x = x0 + k0 * d
        r_max = table.r_max[j]
        # steps too near the origin for the series (d / x > r_max) are summed one by one
        head = m if r_max == 0.0 else (
            0 if d <= r_max * x else min(m, math.ceil((d / r_max - x) / d)))
        if m - head == 1:
            head = m
        head_ends: list[float] = []
        total = 0.0
        for k in range(k0, k0 + head):
            total += value(x0 + k * d)
            head_ends.append(total)
        t_a = r = 0.0
        if head < m:
            xa = x0 + (k0 + head) * d
            r = d / xa
            t_a = first_t if k0 + head == 0 and first_t is not None else value(xa)
        return _Piece(k0, table.exponents[j], head_ends, t_a, r, table.coefs[j], before)

    # -- reading ---------------------------------------------------------------------------
    def _own_s(self, i: int) -> float:
        """Step i's length without the floor."""
        x = self._x_run + i * self._d
        return (self._fixed + self._scale * self._value(x)) + x * self._per_key

    def step_s(self, i: int) -> float:
        """Step i's own length, as a single step is priced."""
        if i == 0:
            return self._first_s
        if i < self._lead:
            return self._floor
        if i == self.n - 1:
            last = self._last_step_s
            if last is None:
                last = self._last_step_s = self._own_s(i)
            return last
        memo = self._step_memo
        if memo[0] == i:              # a cut's last step: its longest, then its gaps
            return memo[1]
        own = self._own_s(i)
        self._step_memo = (i, own)
        return own

    def max_step_s(self, num_steps: int) -> float:
        """The longest of the first ``num_steps`` steps: the last (steps only grow)."""
        return self.step_s(num_steps - 1)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> float:
        if i < 0:
            i += self.n
        memo = self._memo
        if memo[0] == i:              # a cut reads the end its count found, and so on
            return memo[1]
        lead = self._lead
        if i < lead:
            return (i + 1) * self._floor
        m = i + 1 - lead              # steps after the lead, at least one
        # Σ table over them, from the piece their last step is in
        pieces = self._pieces
        p = pieces[bisect_right(self._starts, m - 1) - 1] if len(pieces) > 1 else pieces[0]
        table_sum = p.before + p.sum(m - p.k0)
        keys = m * self._x0 + self._d * (m * (m - 1) / 2.0)
        end = (lead * self._floor if lead else 0.0) + (
            m * self._fixed + self._scale * table_sum + self._per_key * keys)
        self._memo = (i, end)
        return end

    def count_before(self, elapsed_s: float, inclusive: bool) -> int:
        """Steps ending before ``elapsed_s`` (at or before it when ``inclusive``): guessed
        as if step lengths grew linearly over the run, moved by the steps the gap at the
        guess holds, then checked against the ends as ``[i]`` gives them."""
        n = self.n
        if elapsed_s > self.last_s or (inclusive and elapsed_s == self.last_s):
            return n

        def before(i: int) -> bool:
            end = self[i]
            return end < elapsed_s or (inclusive and end == elapsed_s)

        first = self._first_s
        slope = (self.step_s(n - 1) - first) / (n - 1) if n > 1 else 0.0
        b = first - slope / 2.0
        if slope > 0.0:
            m = (-b + math.sqrt(max(b * b + 2.0 * slope * elapsed_s, 0.0))) / slope
        else:
            m = elapsed_s / first if first > 0.0 else 0.0
        k = min(max(int(m), 0), n)
        lo, hi = 0, n                 # the count lies in [lo, hi]
        for _ in range(6):
            # step k - 1 read first: the count's own end (k) is the one read last
            if k > 0 and not before(k - 1):
                hi = k - 1
                k = max(k - 1 - int((self[k - 1] - elapsed_s) / self.step_s(k - 1)), lo)
            elif k < n and before(k):
                lo = k + 1
                k = min(k + 1 + int((elapsed_s - self[k]) / self.step_s(min(k + 1, n - 1))),
                        hi)
            else:
                return k
            if lo >= hi:
                return lo
        return count_true(before, lo, hi)     # ends increase: bisect what is left
