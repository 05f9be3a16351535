"""Request rate as a function of run time, with its integral and inverse.

Time-varying arrivals are made by time rescaling: a unit-rate process in
"operational time" u is mapped to run time by t = Λ⁻¹(u), where
Λ(t) = ∫₀ᵗ rate. This keeps the shape of the gap distribution (Poisson
stays Poisson, gamma keeps its cv locally) while the rate follows the
profile, and it is exact and vectorised, unlike thinning.
"""
from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from sim.config.workload import (
    ConstantRateConfig,
    PiecewiseRateConfig,
    RateConfig,
    SinusoidalRateConfig,
)


class RateFunction(Protocol):
    """Rate λ(t), its integral Λ(t) and the inverse of Λ, all vectorised over t."""

    def rate_per_s(self, t_s: np.ndarray) -> np.ndarray: ...

    def cumulative(self, t_s: np.ndarray) -> np.ndarray: ...

    def time_at_cumulative(self, count: np.ndarray) -> np.ndarray:
        """Smallest t with Λ(t) = count; +inf where the rate has ended for good."""
        ...


class ConstantRate:
    """λ(t) = r."""

    def __init__(self, rate_per_s: float):
        self._rate_per_s = float(rate_per_s)

    def rate_per_s(self, t_s: np.ndarray) -> np.ndarray:
        return np.full(np.shape(t_s), self._rate_per_s)

    def cumulative(self, t_s: np.ndarray) -> np.ndarray:
        return np.asarray(t_s, dtype=np.float64) * self._rate_per_s

    def time_at_cumulative(self, count: np.ndarray) -> np.ndarray:
        return np.asarray(count, dtype=np.float64) / self._rate_per_s


class PiecewiseRate:
    """Piecewise-constant λ; Λ is piecewise linear, so its inverse is exact."""

    def __init__(self, times_s: np.ndarray, rates_per_s: np.ndarray):
        self._times_s = np.asarray(times_s, dtype=np.float64)
        self._rates_per_s = np.asarray(rates_per_s, dtype=np.float64)
        # Λ at each breakpoint; the last segment runs to +inf.
        self._cum_at_breaks = np.concatenate(
            ([0.0], np.cumsum(np.diff(self._times_s) * self._rates_per_s[:-1])))

    def _segment(self, t_s: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._times_s, t_s, side="right") - 1

    def rate_per_s(self, t_s: np.ndarray) -> np.ndarray:
        return self._rates_per_s[np.maximum(self._segment(t_s), 0)]

    def cumulative(self, t_s: np.ndarray) -> np.ndarray:
        t_s = np.asarray(t_s, dtype=np.float64)
        k = np.maximum(self._segment(t_s), 0)
        return self._cum_at_breaks[k] + (t_s - self._times_s[k]) * self._rates_per_s[k]

    def time_at_cumulative(self, count: np.ndarray) -> np.ndarray:
        count = np.asarray(count, dtype=np.float64)
        # side="right" skips zero-rate segments: Λ is flat there, so the last
        # breakpoint with Λ <= count starts the segment that reaches count.
        k = np.maximum(np.searchsorted(self._cum_at_breaks, count, side="right") - 1, 0)
        rate = self._rates_per_s[k]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_s = self._times_s[k] + (count - self._cum_at_breaks[k]) / rate
        return np.where(rate > 0, t_s, np.inf)


class SinusoidalRate:
    """λ(t) = mean + A·sin(2π(t - phase)/P).

    Λ has a closed form but no closed-form inverse. Because Λ(t + P) =
    Λ(t) + mean·P, one period tabulated on a fine grid and inverted with
    np.interp serves every t; the error is below one grid step (P/8192)
    since Λ is monotone.
    """

    _GRID_POINTS = 8193

    def __init__(self, mean_per_s: float, amplitude_per_s: float, period_s: float,
                 phase_s: float):
        self._mean = float(mean_per_s)
        self._amp = float(amplitude_per_s)
        self._period_s = float(period_s)
        self._phase_s = float(phase_s)
        self._grid_s = np.linspace(0.0, self._period_s, self._GRID_POINTS)
        self._grid_cum = self.cumulative(self._grid_s)
        self._cum_per_period = self._mean * self._period_s

    def _angle(self, t_s: np.ndarray) -> np.ndarray:
        return 2.0 * math.pi * (np.asarray(t_s, dtype=np.float64) - self._phase_s) / self._period_s

    def rate_per_s(self, t_s: np.ndarray) -> np.ndarray:
        return self._mean + self._amp * np.sin(self._angle(t_s))

    def cumulative(self, t_s: np.ndarray) -> np.ndarray:
        t_s = np.asarray(t_s, dtype=np.float64)
        k = self._amp * self._period_s / (2.0 * math.pi)
        return self._mean * t_s - k * (np.cos(self._angle(t_s)) - np.cos(self._angle(0.0)))

    def time_at_cumulative(self, count: np.ndarray) -> np.ndarray:
        count = np.asarray(count, dtype=np.float64)
        periods = np.floor(count / self._cum_per_period)
        rest = count - periods * self._cum_per_period
        return periods * self._period_s + np.interp(rest, self._grid_cum, self._grid_s)


def build_rate(cfg: RateConfig, rate_scale: float = 1.0) -> RateFunction:
    """Turn a rate config into a :class:`RateFunction`, multiplied by ``rate_scale``."""
    if isinstance(cfg, ConstantRateConfig):
        return ConstantRate(cfg.value * rate_scale)
    if isinstance(cfg, PiecewiseRateConfig):
        times_s, rates_per_s = zip(*cfg.points)
        return PiecewiseRate(np.array(times_s), np.array(rates_per_s) * rate_scale)
    if isinstance(cfg, SinusoidalRateConfig):
        return SinusoidalRate(cfg.mean * rate_scale, cfg.amplitude * rate_scale,
                              cfg.period, cfg.phase)
    raise TypeError(f"unknown rate config {type(cfg).__name__}")
