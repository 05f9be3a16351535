"""Per-pool time series: sampled state plus busy time and tokens per interval.

Queue length, running sequences and KV use are sampled instantaneously every
``sample_interval``. Busy fraction and tokens/s over each interval are
computed exactly from the replicas' busy segments: each segment spreads its
tokens uniformly over its duration, and the cumulative busy time and token
count at any instant is a sum of ramps, evaluated with prefix sums.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def _ramp_integral(starts: np.ndarray, ends: np.ndarray, rates: np.ndarray,
                   at: np.ndarray) -> np.ndarray:
    """Σ_i rate_i · |[start_i, end_i) ∩ [0, x)| for each x in ``at``."""
    def part(edges: np.ndarray) -> np.ndarray:
        order = np.argsort(edges, kind="stable")
        e, r = edges[order], rates[order]
        cum_r = np.concatenate([[0.0], np.cumsum(r)])
        cum_re = np.concatenate([[0.0], np.cumsum(r * e)])
        k = np.searchsorted(e, at, side="left")
        return cum_r[k] * at - cum_re[k]

    return part(starts) - part(ends)


def build_timeseries(samples: pd.DataFrame, segments: pd.DataFrame, interval_s: float,
                     pool_names: list[str]) -> pd.DataFrame:
    frames = []
    for code, name in enumerate(pool_names):
        smp = samples[samples["pool"] == code]
        seg = segments[segments["pool"] == code]
        t = smp["time_s"].to_numpy()
        edges = np.concatenate([[0.0], t])
        s, e = seg["start_s"].to_numpy(), seg["end_s"].to_numpy()
        dur = np.maximum(e - s, 1e-300)
        busy = np.diff(_ramp_integral(s, e, np.ones_like(s), edges))
        tokens = np.diff(_ramp_integral(s, e, seg["num_tokens"].to_numpy() / dur, edges))
        replicas = smp["replicas"].to_numpy()
        total_blocks = smp["kv_total_blocks"].to_numpy()
        width = np.diff(edges)
        frames.append(pd.DataFrame({
            "time_s": t,
            "pool": name,
            "replicas": replicas,
            "queued": smp["queued"].to_numpy(),
            "running": smp["running"].to_numpy(),
            "in_system": smp["queued"].to_numpy() + smp["running"].to_numpy(),
            "kv_util": np.divide(smp["kv_used_blocks"].to_numpy(), total_blocks,
                                 out=np.zeros(len(t)), where=total_blocks > 0),
            "busy_frac": np.divide(busy, replicas * width, out=np.zeros(len(t)),
                                   where=replicas > 0),
            "tokens_per_s": tokens / width,
        }))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)
