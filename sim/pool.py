"""A pool: identical replicas of one model on one GPU kind, behind a router.

The pool turns away requests that can never be served here (too long for
the model or the KV cache) with a status, and hands the rest to a replica.
"""
from __future__ import annotations

import simpy

from sim.config.resolve import ResolvedPool
from sim.cost.base import CostModel
from sim.cost.roofline import RooflineConfig, RooflineCostModel
from sim.kv import KvCacheManager
from sim.recorder import Recorder
from sim.replica import Replica
from sim.request import Request
from sim.routers.base import Router
from sim.routers.least_outstanding import LeastOutstandingConfig, LeastOutstandingRouter
from sim.routers.round_robin import RoundRobinConfig, RoundRobinRouter
from sim.schedulers.base import ReplicaLimits, Scheduler
from sim.schedulers.continuous import ContinuousConfig, ContinuousScheduler
from sim.schedulers.single import SingleConfig, SingleScheduler
from sim.schedulers.static import StaticConfig, StaticScheduler
from sim.usage import PoolUsage

SCHEDULERS: dict[type, type[Scheduler]] = {
    SingleConfig: SingleScheduler, StaticConfig: StaticScheduler,
    ContinuousConfig: ContinuousScheduler,
}
ROUTERS: dict[type, type[Router]] = {
    RoundRobinConfig: RoundRobinRouter, LeastOutstandingConfig: LeastOutstandingRouter,
}


def build_cost_model(pool: ResolvedPool) -> CostModel:
    cfg = pool.cfg.cost_model
    if isinstance(cfg, RooflineConfig):
        return RooflineCostModel(pool.model, pool.hardware, pool.cfg.tp,
                                 pool.cfg.weight_dtype, pool.cfg.kv_dtype, cfg)
    raise TypeError(f"no cost model for {type(cfg).__name__}")


class Pool:
    def __init__(self, env: simpy.Environment, spec: ResolvedPool, recorder: Recorder,
                 on_finish, on_reject, interval_s: float) -> None:
        self.env = env
        self.spec = spec
        self.name = spec.name
        self.model_name = spec.model.name
        self.code = recorder.pools.code(spec.name)
        self.cost_model = build_cost_model(spec)
        self._on_reject = on_reject
        self._on_finish = on_finish
        self.router: Router = ROUTERS[type(spec.cfg.router)](spec.cfg.router)
        limits = ReplicaLimits(max_model_len=spec.max_model_len)
        sched_cls = SCHEDULERS[type(spec.cfg.scheduler)]
        self.usage = PoolUsage(interval_s)
        self.replicas: list[Replica] = []
        for i in range(spec.cfg.replicas):
            kv = KvCacheManager(spec.kv.num_blocks, spec.kv.block_size_tokens)
            scheduler = sched_cls(spec.cfg.scheduler, kv=kv, cost=self.cost_model,
                                  limits=limits, on_finish=self._finished)
            self.replicas.append(Replica(env, self.code, i, scheduler, recorder, self.usage))

    def _finished(self, req: Request) -> None:
        self.router.on_done(req.replica)
        self._on_finish(req)

    def submit(self, req: Request) -> None:
        reason = self.replicas[0].scheduler.reject_reason(req)
        if reason is not None:
            self._on_reject(req, reason)
            return
        self.router.pick(req, self.replicas).submit(req)

    # -- state for sampling ------------------------------------------------------
    def snapshot(self) -> tuple[int, int, int, int, int]:
        queued = running = used = total = 0
        for r in self.replicas:
            s = r.scheduler
            queued += s.num_waiting
            running += s.num_running
            used += r.kv_used_blocks()
            total += s.kv.num_blocks
        return len(self.replicas), queued, running, used, total

    def open_requests(self):
        for r in self.replicas:
            yield from r.scheduler.open_requests()
