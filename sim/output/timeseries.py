"""Per-pool time series: sampled state plus busy time and tokens per interval.

Queue length, running sequences and KV use are sampled at the end of every
``sample_interval``; busy fraction and tokens/s over the interval come from
the pool's usage bins (exact, not sampled).
"""
from __future__ import annotations

import numpy as np

from sim.recording.accounts import PoolAccount
from sim.output.columns import Table


def build_timeseries(samples: dict[str, np.ndarray], pools: dict[str, PoolAccount],
                     interval_s: float, pool_names: list[str], end_s: float) -> Table:
    """One row per pool per sample (``samples``: the recorder's columns, pools by code);
    ``cost_usd_per_h`` is the billing rate then (every requested replica's GPUs at the
    pool's price)."""
    parts: list[dict[str, np.ndarray]] = []
    for code, name in enumerate(pool_names):
        mine = samples["pool"] == code
        smp = {column: values[mine] for column, values in samples.items()}
        t = smp["time_s"]
        account = pools[name]
        busy, tokens, serving_s = account.usage.per_interval(len(t), end_s)
        replicas = smp["replicas"]
        total_blocks = smp["kv_total_blocks"]
        queued, running = smp["queued"], smp["running"]
        parts.append({
            "time_s": t,
            "pool": np.full(len(t), name, dtype=object),
            "replicas": replicas,
            "ready": smp["ready"],
            "starting": smp["starting"],
            "draining": smp["draining"],
            "queued": queued,
            "running": running,
            "in_system": queued + running,
            "kv_util": np.divide(smp["kv_used_blocks"], total_blocks,
                                 out=np.zeros(len(t)), where=total_blocks > 0),
            "busy_frac": np.divide(busy, serving_s, out=np.zeros(len(t)),
                                   where=serving_s > 0),
            "tokens_per_s": tokens / interval_s,
            "cost_usd_per_h": replicas * account.gpus_per_replica
            * account.price_per_gpu_hour,
        })
    if not parts:
        return Table({})
    return Table({column: np.concatenate([p[column] for p in parts]) for column in parts[0]})
