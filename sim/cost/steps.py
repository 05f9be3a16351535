"""Cumulative step end times of a segment: an array, or a closed form."""
from __future__ import annotations

import numpy as np


class StepEnds:
    """Cumulative end offsets of a segment's steps, as an array."""

    __slots__ = ("_ends",)

    def __init__(self, ends) -> None:
        self._ends = np.asarray(ends, dtype=np.float64)

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> float:
        return float(self._ends[i])

    def count_before(self, elapsed_s: float, inclusive: bool) -> int:
        """Steps ending before ``elapsed_s`` (at or before it when ``inclusive``)."""
        return int(np.searchsorted(self._ends, elapsed_s, side="right" if inclusive else "left"))


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
