"""What the run hands over when it ends: flat accounts, one per pool, and the run's own.

Results (tables, time series, the summary) are built from these and the recorder's
tables only, never from the live pools, replicas or cost models, so what the results
may depend on is written down here, and the run's objects can go once it has ended.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.config.scenario import Scenario
from sim.recording.usage import PoolUsage

if TYPE_CHECKING:
    from sim.recording.recorder import Recorder


@dataclass(frozen=True)
class PoolAccount:
    """A pool at the end of the run: what it was, what it was billed, how it was used."""

    model: str
    hardware: str
    tp: int
    pp: int                             # pipeline stages a replica
    weight_dtype: str                   # the weights' precision (bf16, fp8, int4)
    kv_dtype: str                       # the KV cache's precision
    cost_model: str                     # the cost model's label
    engine: str                         # the engine version it ran, "vllm@async"
    gpus_per_replica: int
    price_per_gpu_hour: float
    kv_blocks_per_replica: int
    billed_gpu_s: float                 # every replica from asked for to released (or end)
    replicas_max: int
    peak_flops_per_gpu: float
    peak_bytes_per_s_per_gpu: float
    usage: PoolUsage                    # busy time, tokens, work, per interval and in all
    # each replica's billed interval (requested, released or end), for the GPU time billed
    # inside a window (summary.json's active span)
    billing_intervals_s: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class RunAccount:
    """The run at its end: the scenario, the recorder's tables and each pool's account."""

    scenario: Scenario
    end_s: float
    stream_names: tuple[str, ...]
    events_scheduled: int
    wall_s: float                  # set-up and event loop
    recorder: "Recorder"
    pools: dict[str, PoolAccount]
    setup_s: float = 0.0           # of wall_s, before the first event (see api.prepare)
