"""Cumulative step end times of a segment: an array, or a closed form."""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np


class StepEnds:
    """Cumulative end offsets of a segment's steps, as a list of floats."""

    __slots__ = ("_ends",)

    def __init__(self, ends) -> None:
        self._ends = ends.tolist() if isinstance(ends, np.ndarray) else list(ends)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> float:
        return self._ends[i]

    def count_before(self, elapsed_s: float, inclusive: bool) -> int:
        """Steps ending before ``elapsed_s`` (at or before it when ``inclusive``)."""
        return (bisect_right if inclusive else bisect_left)(self._ends, elapsed_s)


class LinearStepEnds:
    """Step i lasts first + slope·i: ends in closed form, no array.

    The steps of a fast-forwarded decode run under a cost model whose step
    time is linear in the KV tokens read (the roofline) take this form.
    """

    __slots__ = ("first", "slope", "n")

    def __init__(self, first_s: float, slope_s: float, num_steps: int) -> None:
        self.first, self.slope, self.n = first_s, slope_s, num_steps

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> float:
        if i < 0:
            i += self.n
        return (i + 1) * self.first + self.slope * (i * (i + 1) / 2.0)

    def count_before(self, elapsed_s: float, inclusive: bool) -> int:
        lo, hi = 0, self.n            # ends are increasing: binary search
        while lo < hi:
            mid = (lo + hi) // 2
            end = self[mid]
            if end < elapsed_s or (inclusive and end == elapsed_s):
                lo = mid + 1
            else:
                hi = mid
        return lo
