"""What the measured-kernel database's tables are read as (``kernel_db`` reads them):
a GEMM shape's latency curve over tokens m (``GemmCurves``, a point timed slower than a
larger m read as that m's time) and one layer's MoE op over tokens (``MoeCurve``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from calibrate.fitting.tables import evaluate, make_table_raw

MOE_EVEN = "balanced"            # tokens spread evenly over the experts
MOE_SKEWED = "power_law_"        # else the least skewed power law a table has
MS = 1e-3                        # the tables' latencies are in milliseconds
# a GEMM timed slower than a larger m of its shape by more than this share is read as the
# larger m's time (GemmCurves); below it, the difference is timing noise (the flat,
# memory-bound small-m end of a curve scatters by a few per cent)
GEMM_NOISE = 0.10


class KernelDbError(ValueError):
    """The database, or what was asked of it, is not there (named, with what exists)."""


@dataclass(frozen=True)
class MoeCurve:
    """One layer's MoE op on one GPU by tokens (before routing), from one table's rows."""

    tokens: np.ndarray
    seconds: np.ndarray
    version: str
    moe_dtype: str
    distribution: str
    kernel: str
    tp: int

    @staticmethod
    def from_rows(rows, version: str, moe_dtype: str, tp: int) -> "MoeCurve":
        dists = set(rows["distribution"].astype(str))
        skewed = sorted((d for d in dists if d.startswith(MOE_SKEWED)),
                        key=lambda d: float(d[len(MOE_SKEWED):]))
        dist = MOE_EVEN if MOE_EVEN in dists else skewed[0] if skewed else sorted(dists)[0]
        rows = rows[rows["distribution"] == dist]
        kernel = main_kernel(rows)
        rows = rows[rows["kernel_source"] == kernel] if "kernel_source" in rows else rows
        # a shape timed twice at one token count: the median
        points = make_table_raw(list(zip(rows["num_tokens"].to_numpy(np.float64),
                                         rows["latency"].to_numpy(np.float64) * MS)))
        return MoeCurve(np.array([x for x, _ in points]), np.array([t for _, t in points]),
                        version, moe_dtype, dist, kernel, tp)

    def describe(self) -> str:
        return (f"{self.version} {self.moe_dtype} {self.kernel}, moe_tp {self.tp} moe_ep 1, "
                f"{self.distribution} routing")


def main_kernel(rows) -> str:
    """The kernel timed on the most shapes (ties: the first by name)."""
    if "kernel_source" not in rows:
        return "unnamed"
    counts = rows["kernel_source"].astype(str).value_counts()
    best = counts.max()
    return sorted(k for k, c in counts.items() if c == best)[0]


def capped_in_m(points: list[tuple[float, float]],
                tolerance: float = GEMM_NOISE) -> tuple[list[tuple[float, float]], int]:
    """The points (sorted by m) with each one timed slower than a larger m of the curve
    by more than ``tolerance`` (a share of the larger m's seconds) read as that larger
    m's time, and how many were: timing noise is kept (the table's monotone fit evens
    it out)."""
    out, best, capped = [], math.inf, 0
    for m, t in reversed(points):
        if t > best * (1.0 + tolerance):
            t, capped = best, capped + 1
        out.append((m, t))
        best = min(best, t)
    return out[::-1], capped


class GemmCurves:
    """GEMM seconds at any (m, n, k) from the measured grid.

    Each measured (n, k) has a curve over m, read linearly in (log m, log seconds)
    between measured m, the first point's below them and in proportion to m past the
    last (the GEMM split into as many). A point timed more than GEMM_NOISE slower than
    a larger m of its shape is read as that larger m's time (``capped_in_m``;
    ``capped`` counts them). vLLM's and SGLang's FP8 CUTLASS rows have such points at
    m = 256·j + 1 (on H200 m = 257 is timed at 1.3-1.7 x m = 512), which TensorRT-LLM's
    FP8 and the BF16 tables mostly lack: past m = 128 vLLM's SM90 FP8 kernel runs
    128 x 128 tiles in clusters of two along m, so every m in (256·j, 256·(j + 1)] does
    the work of 256·(j + 1) rows and is timed here as that m is, a step at each
    multiple of 256. A shape off the grid is read by bilinear
    interpolation of log seconds in (log n, log k) between the four measured shapes
    around it: exact for a GEMM bound by its weights (time ∝ n·k) or by its FLOPs
    (∝ m·n·k); past the largest n or k measured it is split into equal parts that are.
    """

    def __init__(self, curves: dict[tuple[int, int], list[list[float]]],
                 capped: int = 0) -> None:
        self.curves = curves                   # (n, k) -> [[m, seconds], ...] by m
        self.capped = capped                   # measured points slower than a larger m
        self.ns = sorted({n for n, _ in curves})
        self.ks = sorted({k for _, k in curves})

    @staticmethod
    def from_rows(rows) -> "GemmCurves":
        curves, capped = {}, 0
        for (n, k), g in rows.groupby(["n", "k"]):
            # a shape measured twice at one m: the median
            points = zip(g["m"].to_numpy(np.float64), g["latency"].to_numpy(np.float64) * MS)
            curve, count = capped_in_m(make_table_raw(list(points)))
            capped += count
            curves[(int(n), int(k))] = [list(p) for p in curve]
        return GemmCurves(curves, capped)

    def _on_curve(self, n: int, k: int, m: float) -> float:
        return float(evaluate(self.curves[(n, k)], m))

    def seconds(self, m: float, n: int, k: int) -> float:
        if (n, k) in self.curves:
            return self._on_curve(n, k, m)
        n_max, k_max = self.ns[-1], self.ks[-1]
        if n > n_max:
            parts = math.ceil(n / n_max)
            return parts * self.seconds(m, math.ceil(n / parts), k)
        if k > k_max:
            parts = math.ceil(k / k_max)
            return parts * self.seconds(m, n, math.ceil(k / parts))
        n0, n1 = _bracket(self.ns, n)
        k0, k1 = _bracket(self.ks, k)
        corners = {}
        for a in {n0, n1}:
            for b in {k0, k1}:
                if (a, b) not in self.curves:
                    raise KernelDbError(f"GEMM ({n} x {k}): the database lacks the measured "
                                        f"shape ({a} x {b}) around it")
                corners[(a, b)] = math.log(self._on_curve(a, b, m))
        fn = 0.0 if n1 == n0 else (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
        fk = 0.0 if k1 == k0 else (math.log(k) - math.log(k0)) / (math.log(k1) - math.log(k0))
        low = corners[(n0, k0)] * (1 - fk) + corners[(n0, k1)] * fk
        high = corners[(n1, k0)] * (1 - fk) + corners[(n1, k1)] * fk
        return float(math.exp(low * (1 - fn) + high * fn))

    def m_grid(self) -> list[float]:
        """Every m measured on any shape."""
        return sorted({float(m) for rows in self.curves.values() for m, _ in rows})


def _bracket(grid: list[int], v: int) -> tuple[int, int]:
    if v <= grid[0]:
        return grid[0], grid[0]
    for a, b in zip(grid, grid[1:]):
        if a <= v <= b:
            return (a, a) if v == a else (b, b) if v == b else (a, b)
    return grid[-1], grid[-1]
