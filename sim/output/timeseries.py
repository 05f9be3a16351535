"""Per-pool time series: sampled state plus busy time and tokens per interval.

Queue length, running sequences and KV use are sampled at the end of every
``sample_interval``; busy fraction and tokens/s over the interval come from
the pool's usage bins (exact, not sampled).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from sim.output.accounts import PoolAccount


def build_timeseries(samples: pd.DataFrame, pools: dict[str, PoolAccount], interval_s: float,
                     pool_names: list[str], end_s: float) -> pd.DataFrame:
    """One row per pool per sample; ``cost_usd_per_h`` is the billing rate then
    (every requested replica's GPUs at the pool's price)."""
    frames = []
    for code, name in enumerate(pool_names):
        smp = samples[samples["pool"] == code]
        t = smp["time_s"].to_numpy()
        account = pools[name]
        busy, tokens, serving_s = account.usage.per_interval(len(t), end_s)
        replicas = smp["replicas"].to_numpy()
        total_blocks = smp["kv_total_blocks"].to_numpy()
        queued, running = smp["queued"].to_numpy(), smp["running"].to_numpy()
        frames.append(pd.DataFrame({
            "time_s": t,
            "pool": name,
            "replicas": replicas,
            "ready": smp["ready"].to_numpy(),
            "starting": smp["starting"].to_numpy(),
            "draining": smp["draining"].to_numpy(),
            "queued": queued,
            "running": running,
            "in_system": queued + running,
            "kv_util": np.divide(smp["kv_used_blocks"].to_numpy(), total_blocks,
                                 out=np.zeros(len(t)), where=total_blocks > 0),
            "busy_frac": np.divide(busy, serving_s, out=np.zeros(len(t)),
                                   where=serving_s > 0),
            "tokens_per_s": tokens / interval_s,
            "cost_usd_per_h": replicas * account.gpus_per_replica
            * account.price_per_gpu_hour,
        }))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)
