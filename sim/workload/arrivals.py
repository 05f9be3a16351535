"""Arrival times of Poisson and gamma renewal processes with time-varying rates.

Both processes are drawn as unit-rate renewal processes in operational
time and mapped to run time through the inverse cumulative rate (see
:mod:`sim.workload.rates`). Gaps are drawn in array chunks sized from the
expected count, so there is no per-arrival Python loop.
"""
from __future__ import annotations

import math

import numpy as np

from sim.config.workload import GammaArrivalConfig, PoissonArrivalConfig
from sim.workload.rates import build_rate


def _unit_renewal_times(rng: np.random.Generator, span: float, cv: float | None
                        ) -> np.ndarray:
    """Event times in [0, span) of a stationary unit-rate renewal process.

    ``cv=None`` means Poisson (exponential gaps). Otherwise gaps are
    Gamma(k, 1/k) with k = 1/cv². The first event uses the equilibrium
    forward-recurrence time (uniform fraction of a length-biased gap,
    Gamma(k+1, 1/k)), so the process is stationary from the window's start
    rather than having every stream fire its first request together.
    """
    if not span > 0:
        return np.empty(0, dtype=np.float64)
    shape = None if cv is None else 1.0 / (cv * cv)
    sd = 1.0 if cv is None else cv
    if shape is None:
        first = rng.standard_exponential()
    else:
        first = rng.uniform() * rng.standard_gamma(shape + 1.0) / shape
    chunks = [np.array([first])]
    last = first
    while last < span:
        remaining = span - last
        size = int(remaining + 6.0 * sd * math.sqrt(remaining) + 16)
        gaps = (rng.standard_exponential(size) if shape is None
                else rng.standard_gamma(shape, size) / shape)
        times = last + np.cumsum(gaps)
        chunks.append(times)
        last = times[-1]
    times = np.concatenate(chunks)
    return times[times < span]


def process_arrival_times(cfg: PoissonArrivalConfig | GammaArrivalConfig,
                          rng: np.random.Generator, start_s: float, stop_s: float,
                          rate_scale: float = 1.0) -> np.ndarray:
    """Sorted arrival times (float64 seconds) in [start_s, stop_s)."""
    if not stop_s > start_s:
        return np.empty(0, dtype=np.float64)
    rate = build_rate(cfg.rate, rate_scale)
    lo, hi = rate.cumulative(np.array([start_s, stop_s], dtype=np.float64))
    cv = cfg.cv if isinstance(cfg, GammaArrivalConfig) else None
    times_s = rate.time_at_cumulative(lo + _unit_renewal_times(rng, hi - lo, cv))
    # Round-off in Λ and its inverse may nudge the edges out of the window.
    return times_s[(times_s >= start_s) & (times_s < stop_s)]
