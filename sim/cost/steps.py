"""Cumulative step end times of a segment: an array, or a closed form.

Every kind (``StepEnds``, ``LinearStepEnds``, ``table_steps.TableRunEnds``) gives ``len``,
``[i]`` (step i's end from the segment's start), ``count_before``, ``step_s(i)`` (step
i's length) and ``max_step_s(num_steps)``."""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right


def count_true(before, lo: int, hi: int) -> int:
    """The first i in [lo, hi] where ``before(i)`` is false, ``before`` being true up
    to some point and false from it on (bisection): how many ends lie before a time."""
    while lo < hi:
        mid = (lo + hi) // 2
        if before(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


class StepEnds(list):
    """Cumulative end offsets of a segment's steps: a list of floats (built from
    a list, ``np.cumsum(...).tolist()`` for an array), so indexing and ``len``
    cost what they cost on a list."""

    __slots__ = ()

    def count_before(self, elapsed_s: float, inclusive: bool) -> int:
        """Steps ending before ``elapsed_s`` (at or before it when ``inclusive``)."""
        return (bisect_right if inclusive else bisect_left)(self, elapsed_s)

    def step_s(self, i: int) -> float:
        return self[i] - self[i - 1] if i else self[0]

    def max_step_s(self, num_steps: int) -> float:
        longest, prev = 0.0, 0.0
        for k in range(num_steps):
            longest = max(longest, self[k] - prev)
            prev = self[k]
        return longest


class LinearStepEnds:
    """Step i lasts first + slope·i: ends in closed form, no array.

    The steps of a fast-forwarded decode run under a cost model whose step
    time is linear in the KV tokens read (the roofline) take this form.
    """

    __slots__ = ("first", "slope", "n", "last_s")

    def __init__(self, first_s: float, slope_s: float, num_steps: int) -> None:
        self.first, self.slope, self.n = first_s, slope_s, num_steps
        i = num_steps - 1
        self.last_s = (i + 1) * first_s + slope_s * (i * (i + 1) / 2.0)   # self[i]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> float:
        if i < 0:
            i += self.n
        return (i + 1) * self.first + self.slope * (i * (i + 1) / 2.0)

    def step_s(self, i: int) -> float:
        return self.first + self.slope * i

    def max_step_s(self, num_steps: int) -> float:
        return max(self.first, self.first + self.slope * (num_steps - 1))

    def count_before(self, elapsed_s: float, inclusive: bool) -> int:
        """Steps ending before ``elapsed_s``: the root of the quadratic end(m - 1) = elapsed,
        then moved to the exact boundary of the ends as ``__getitem__`` computes them."""
        n, first, slope = self.n, self.first, self.slope
        # end(i) = (slope/2)·m² + (first − slope/2)·m with m = i + 1
        b = first - slope / 2.0
        if slope == 0.0:
            m = elapsed_s / first if first > 0 else float(n)
        else:
            disc = b * b + 2.0 * slope * elapsed_s
            m = (-b + math.sqrt(disc)) / slope if disc >= 0 else float(n)
        k = min(max(int(m), 0), n) if math.isfinite(m) else n
        # usually exact: step k-1 ends before elapsed and step k does not
        if 0 < k < n and not inclusive and self[k - 1] < elapsed_s and not self[k] < elapsed_s:
            return k

        def before(i: int) -> bool:
            end = self[i]
            return end < elapsed_s or (inclusive and end == elapsed_s)

        for _ in range(4):            # the root is off by rounding only: a step or two
            if k > 0 and not before(k - 1):
                k -= 1
            elif k < n and before(k):
                k += 1
            else:
                return k
        return count_true(before, 0, n)   # ends are increasing: binary search
