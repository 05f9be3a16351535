"""Fitting measured timings into the tables of a calibrated profile.

Each term becomes a monotone (non-decreasing) table of [x, seconds] points,
read by ``sim.cost.tables.Table`` with interpolation in log-log space: linear
between neighbouring points in (log x, log t), the first point's time below
it (but zero at x = 0: no work, no kernel), and time proportional to x past
the last point. Monotonicity comes from an isotonic (pool-adjacent-violators)
fit of log time over x, which also irons out timing noise.

Every k-th measured point (never the first or last) is held back from its
table, and the table's relative error on those points is reported: an
honest estimate of the interpolation error between measured sizes.

The per-step overhead is what the terms leave unexplained in whole forwards
of the plain-torch model: measured − (layers × Σ terms + lm_head), fitted as
constant + slope × sequences by least squares on relative error, both
clamped at zero.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize

TERMS = ("dense", "attn_prefill", "attn_decode", "lm_head", "tp_comm")
MIN_SECONDS = 1e-9


def isotonic(y: list[float]) -> list[float]:
    """The non-decreasing sequence nearest to ``y`` in least squares (PAV)."""
    blocks: list[list[float]] = []          # [sum, count]
    for v in y:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out.extend([s / c] * int(c))
    return out


def make_table(points: list[tuple[float, float]]) -> list[list[float]]:
    """Monotone [x, seconds] table from measured (x, seconds) points.

    Points with equal x are merged (median); x ≤ 0 is dropped. Time is made
    non-decreasing in x by an isotonic fit of log time. A term that is
    zero everywhere (an unmeasured all-reduce) keeps its zeros.
    """
    merged = make_table_raw(points)
    xs = [x for x, _ in merged]
    ts = [t for _, t in merged]
    if not xs:
        return []
    if all(t <= 0 for t in ts):
        return [[x, 0.0] for x in xs]
    logs = isotonic([math.log(max(t, MIN_SECONDS)) for t in ts])
    return [[x, float(math.exp(v))] for x, v in zip(xs, logs)]


def evaluate(table: list[list[float]], x) -> np.ndarray:
    """Seconds at ``x`` from a table (same rule as ``sim.cost.tables.Table``)."""
    x = np.asarray(x, dtype=np.float64)
    if not table:
        return np.zeros_like(x)
    xs = np.array([p[0] for p in table], dtype=np.float64)
    ts = np.array([p[1] for p in table], dtype=np.float64)
    if not np.any(ts > 0):
        return np.zeros_like(x)
    lt = np.log(np.maximum(ts, MIN_SECONDS))
    inside = np.exp(np.interp(np.log(np.clip(x, xs[0], xs[-1])), np.log(xs), lt))
    beyond = ts[-1] * x / xs[-1]
    return np.where(x > 0, np.where(x > xs[-1], beyond, inside), 0.0)


def held_back_indices(n: int, k: int) -> list[int]:
    """Every k-th of n points sorted by x, never the first or the last."""
    if k < 2 or n < 3:
        return []
    return [i for i in range(k - 1, n - 1, k)]


@dataclass
class TermFit:
    table: list[list[float]]                  # fitted to every point
    measured: list[list[float]]               # [x, seconds] of every point, sorted
    held_back: list[list[float]] = field(default_factory=list)
    # [x, measured, fitted] of the held-back points, by a table fitted without them

    def errors(self) -> dict:
        return error_summary([(m, f) for _, m, f in self.held_back])


def rel_err(measured: float, fitted: float) -> float:
    if measured <= 0:
        return 0.0 if fitted <= 0 else math.inf
    return abs(fitted - measured) / measured


def error_summary(pairs: list[tuple[float, float]]) -> dict:
    errs = [rel_err(m, f) for m, f in pairs]
    if not errs:
        return {"points": 0, "median": None, "max": None}
    return {"points": len(errs), "median": round(float(statistics.median(errs)), 4),
            "max": round(float(max(errs)), 4)}


def fit_term(points: list[tuple[float, float]], k: int = 4,
             extra: list[float] | None = None) -> TermFit:
    """Table from every point, and the held-back error: a table fitted to all but
    every k-th point (sorted by x), compared with those points.

    ``extra``, per point, is a known part of the measured time that the table
    does not hold (decode attention's per-sequence cost): the table is fitted
    to seconds − extra, and held-back errors compare seconds with table + extra.
    """
    extra = list(extra) if extra is not None else [0.0] * len(points)
    rows = sorted((float(x), float(t), float(e)) for (x, t), e in zip(points, extra) if x > 0)
    held = set(held_back_indices(len(rows), k))
    partial = make_table([(x, t - e) for i, (x, t, e) in enumerate(rows) if i not in held])
    held_rows = [[x, t, float(evaluate(partial, x)) + e]
                 for i, (x, t, e) in enumerate(rows) if i in held]
    return TermFit(table=make_table([(x, t - e) for x, t, e in rows]),
                   measured=[[x, t] for x, t, _ in rows], held_back=held_rows)


def make_table_raw(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Distinct x (median of repeats), sorted, x > 0; no monotone smoothing."""
    by_x: dict[float, list[float]] = {}
    for x, t in points:
        if x > 0:
            by_x.setdefault(float(x), []).append(float(t))
    return [(x, float(statistics.median(by_x[x]))) for x in sorted(by_x)]


# -- whole step -----------------------------------------------------------------------------
def terms_seconds(tables: dict[str, list[list[float]]], num_layers: int, num_tokens, num_seqs,
                  prefill_attn_work, decode_kv_tokens) -> np.ndarray:
    """layers × (dense + attn_prefill + attn_decode + tp_comm) + lm_head, no overhead."""
    per_layer = (evaluate(tables["dense"], num_tokens)
                 + evaluate(tables["attn_prefill"], prefill_attn_work)
                 + evaluate(tables["attn_decode"], decode_kv_tokens)
                 + evaluate(tables["tp_comm"], num_tokens))
    return num_layers * per_layer + evaluate(tables["lm_head"], num_seqs)


def nnls(design: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Non-negative least squares (SciPy's active-set solver): the coefficients only."""
    return scipy.optimize.nnls(np.asarray(design, dtype=np.float64),
                               np.asarray(target, dtype=np.float64))[0]


def fit_overhead(measured: np.ndarray, terms: np.ndarray, num_seqs: np.ndarray
                 ) -> tuple[float, float]:
    """(constant_s, per_seq_s) ≥ 0 minimising the relative error of terms + overhead."""
    w = 1.0 / np.maximum(measured, MIN_SECONDS)
    design = np.stack([np.ones_like(num_seqs), num_seqs], axis=1) * w[:, None]
    const, slope = nnls(design, (measured - terms) * w)
    return float(const), float(slope)


def split_per_seq(batch: np.ndarray, kv_tokens: np.ndarray, seconds: np.ndarray
                  ) -> tuple[float, np.ndarray]:
    """Decode attention = per-sequence cost × batch + a function of KV tokens read.

    The step-time model gives decode attention one argument, the KV tokens
    read; what a kernel spends per sequence (set-up, a pass per row) would
    make that table depend on how the tokens split into sequences. A
    non-negative fit of seconds ≈ α·batch + β·kv + γ (relative error) gives
    α; the table is then built from seconds − α·batch, and α goes into the
    step's per-sequence overhead (× layers). Returns (α, adjusted seconds).
    """
    w = 1.0 / np.maximum(seconds, MIN_SECONDS)
    design = np.stack([batch, kv_tokens, np.ones_like(batch)], axis=1) * w[:, None]
    alpha = float(nnls(design, np.ones_like(seconds))[0])
    return alpha, np.maximum(seconds - alpha * batch, 0.05 * seconds)


def predict_steps(tables, overhead: tuple[float, float], num_layers: int, num_tokens, num_seqs,
                  prefill_attn_work, decode_kv_tokens) -> np.ndarray:
    const, slope = overhead
    return (const + slope * np.asarray(num_seqs, dtype=np.float64)
            + terms_seconds(tables, num_layers, num_tokens, num_seqs, prefill_attn_work,
                            decode_kv_tokens))
