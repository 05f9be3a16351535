"""Batching policies of a replica, one per module, and the registry they are built from.

* ``single`` (:mod:`sim.schedulers.single`): one request at a time.
* ``static`` (:mod:`sim.schedulers.static`): fixed batches, run to completion.
* ``continuous`` (:mod:`sim.schedulers.continuous`): vLLM's V1 scheduler (token budget,
  paged KV, chunked prefill, preemption; FCFS or priority).
* ``speculative`` (:mod:`sim.schedulers.speculative`): continuous batching with draft
  tokens verified each step.

A scheduler is built from its config and the parts every replica has (its KV manager,
the pool's cost model, the replica's limits, a finish callback), plus whatever its class
asks of the pool (:meth:`~sim.schedulers.base.Scheduler.pool_parts`).
"""
from __future__ import annotations

from sim.config.policies import Family
from sim.schedulers.base import ReplicaLimits, Scheduler, SchedulerConfigBase
from sim.schedulers.continuous import ContinuousScheduler
from sim.schedulers.continuous_config import ContinuousConfig
from sim.schedulers.single import SingleConfig, SingleScheduler
from sim.schedulers.speculative import SpeculativeConfig, SpeculativeScheduler
from sim.schedulers.static import StaticConfig, StaticScheduler

SCHEDULERS = Family("scheduler", {
    SingleConfig: SingleScheduler, StaticConfig: StaticScheduler,
    ContinuousConfig: ContinuousScheduler, SpeculativeConfig: SpeculativeScheduler,
}, base=SchedulerConfigBase)
SchedulerConfig = SCHEDULERS.union()

__all__ = ["ReplicaLimits", "SCHEDULERS", "Scheduler", "SchedulerConfig"]
