"""Sample prompt and output lengths (in tokens) from their configured distributions.

All samplers return int64 arrays of values >= 1: a request always has at
least one prompt token and produces at least one output token.
"""
from __future__ import annotations

from functools import lru_cache

import math
import pathlib

import numpy as np

from sim.config.lengths import (
    PRESETS,
    MAX_TOKENS,
    EmpiricalLengthConfig,
    ExponentialLengthConfig,
    FixedLengthConfig,
    LengthConfig,
    LognormalLengthConfig,
    MixtureLengthConfig,
    UniformLengthConfig,
)
from sim.config.inputs import DataFiles
from sim.config.paths import data_dir
from sim.workload.trace import (
    WorkloadDataError,
    check_token_counts,
    read_csv_columns,
    resolve_path,
)


def lognormal_params(mean: float, cv: float) -> tuple[float, float]:
    """(mu, sigma) of the underlying normal for a lognormal with this mean and cv.

    Authors know the mean and spread of their lengths, not log-space
    parameters: sigma² = ln(1 + cv²), mu = ln(mean) - sigma²/2.
    """
    sigma2 = math.log1p(cv * cv)
    return math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2)

def _round_clip(samples: np.ndarray, low: int, high: int | None) -> np.ndarray:
    upper = MAX_TOKENS if high is None else min(high, MAX_TOKENS)
    return np.clip(np.rint(samples), low, upper).astype(np.int64)


@lru_cache(maxsize=8)
def preset_lengths(preset: str) -> np.ndarray:
    """A shipped trace's prompt or output lengths (read once per process)."""
    from sim.config.workload import TraceArrivalConfig
    from sim.workload.trace_formats import load_trace
    name, fmt, which = PRESETS[preset]
    path = data_dir("scenarios") / "traces" / name
    trace = load_trace(path, TraceArrivalConfig(type="trace", path=name, format=fmt))
    values = trace.prompt_tokens if which == "prompt" else trace.output_tokens
    values.setflags(write=False)
    return values


def load_empirical_values(cfg: EmpiricalLengthConfig, base_dir: DataFiles | pathlib.Path
                          ) -> tuple[np.ndarray, np.ndarray | None]:
    """The values to resample and their probabilities (None = equal)."""
    if cfg.values is not None:
        values = np.asarray(cfg.values, dtype=np.int64)
        if cfg.weights is None:
            return values, None
        weights = np.asarray(cfg.weights, dtype=np.float64)
        return values, weights / weights.sum()
    if cfg.preset is not None:
        return preset_lengths(cfg.preset), None
    path = resolve_path(cfg.path, base_dir)
    cols, lines = read_csv_columns(path, (cfg.column,))
    values = check_token_counts(path, cfg.column, cols[cfg.column], lines)
    if len(values) == 0:
        raise WorkloadDataError(path, f"column {cfg.column!r} has no values")
    return values, None


def sample_lengths(cfg: LengthConfig, n: int, rng: np.random.Generator,
                   base_dir: DataFiles | pathlib.Path) -> np.ndarray:
    """Draw ``n`` lengths (int64, >= 1) from ``cfg``."""
    if isinstance(cfg, FixedLengthConfig):
        return np.full(n, cfg.value, dtype=np.int64)
    if isinstance(cfg, UniformLengthConfig):
        return rng.integers(cfg.low, cfg.high, size=n, endpoint=True, dtype=np.int64)
    if isinstance(cfg, LognormalLengthConfig):
        mu, sigma = lognormal_params(cfg.mean, cfg.cv)
        return _round_clip(rng.lognormal(mu, sigma, size=n), cfg.min, cfg.max)
    if isinstance(cfg, ExponentialLengthConfig):
        return _round_clip(rng.exponential(cfg.mean, size=n), cfg.min, cfg.max)
    if isinstance(cfg, EmpiricalLengthConfig):
        values, probs = load_empirical_values(cfg, base_dir)
        return values[rng.choice(len(values), size=n, p=probs)]
    if isinstance(cfg, MixtureLengthConfig):
        weights = np.array([c.weight for c in cfg.components], dtype=np.float64)
        which = rng.choice(len(weights), size=n, p=weights / weights.sum())
        out = np.empty(n, dtype=np.int64)
        for k, component in enumerate(cfg.components):
            mask = which == k
            out[mask] = sample_lengths(component.dist, int(mask.sum()), rng, base_dir)
        return out
    raise TypeError(f"unknown length config {type(cfg).__name__}")
