"""The composition root: a resolved pool turned into the parts it runs with.

Every policy family builds its own members (:mod:`sim.schedulers`, :mod:`sim.cost`,
:mod:`sim.routers`, :mod:`sim.autoscalers`); this module asks each for the pool's, fills
in what the serving engine leaves to them (:mod:`sim.config.engines`) and hands the parts to
:class:`~sim.core.pool.Pool`, which runs them and knows none of their kinds.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from sim.autoscalers import Autoscaler, build_autoscaler
from sim.config.resolve import ResolvedPool
from sim.cost import CostModel, build_cost_model
from sim.config.engines import FrontEnd, front_end
from sim.cost.engine_host import with_engine_host
from sim.gateway.fair_queue import FairQueue
from sim.schedulers.gaps import GapHistogram
from sim.entities.kv import KvCacheManager
from sim.entities.request import Request
from sim.routers import ROUTERS
from sim.routers.base import Router
from sim.schedulers import SCHEDULERS, ReplicaLimits, Scheduler

# (the replica's KV manager, its finish callback, where its gaps between tokens are
# counted: the run's, or None for a scheduler of its own)
SchedulerFactory = Callable[[KvCacheManager, Callable[[Request], None], GapHistogram | None],
                            Scheduler]


@dataclass
class PoolParts:
    cost_model: CostModel
    router: Router
    queue: FairQueue
    autoscaler: Autoscaler | None
    front_end: FrontEnd          # a request's way through the engine's front end and back
    new_scheduler: SchedulerFactory   # (the replica's KV manager, its finish callback, gaps)
    join_after_next: bool = False     # a request arriving during step k joins step k+2
    multi_step: int = 1               # steps per scheduling block


def draft_cost_model(spec: ResolvedPool, base_dir=None) -> CostModel | None:
    """The cost model of the pool's draft model (None without one): the pool's own kind
    of cost model, on its GPUs, tp, pipeline stages and dtypes, for the draft's
    profile."""
    if spec.draft_model is None:
        return None
    return build_cost_model(dataclasses.replace(spec, model=spec.draft_model), base_dir)


def pool_parts(spec: ResolvedPool, rng: np.random.Generator,
               team_weights: dict[str, float] | None = None, base_dir=None) -> PoolParts:
    """The parts of pool ``spec``. ``rng`` is the pool's own random stream (its router
    and any policy that draws share it); ``team_weights`` the gateway's fair-share
    weights, under the pool's own; ``base_dir`` where relative profile paths are tried
    first."""
    cfg = spec.cfg
    engine = spec.engine
    cost = with_engine_host(build_cost_model(spec, base_dir), engine, cfg.pp)
    router = ROUTERS.built_by(cfg.router)(cfg.router, rng)
    queue = FairQueue(capacity=cfg.queue.capacity,
                      weights={**(team_weights or {}), **cfg.queue.weights},
                      fair=cfg.queue.fair)
    autoscaler = build_autoscaler(cfg.autoscaler) if cfg.autoscaler is not None else None
    # the pool's front end, else the engine's, unless the steps were measured on it
    front = front_end(engine, cfg.front_end, cost.measures_engine)
    # the scheduler's settings, with what they leave to the engine filled in
    sched_cfg = cfg.scheduler.with_engine(engine, cost.measures_engine)
    sched_cls = SCHEDULERS.built_by(cfg.scheduler)
    extra = sched_cls.pool_parts(rng, draft_cost_model(spec, base_dir))
    limits = ReplicaLimits(max_model_len=spec.max_model_len)

    def new_scheduler(kv: KvCacheManager, on_finish: Callable[[Request], None],
                      gaps: GapHistogram | None = None) -> Scheduler:
        return sched_cls(sched_cfg, kv=kv, cost=cost, limits=limits, on_finish=on_finish,
                         gaps=gaps, **extra)

    # the engine's step pipelining, unless the steps were measured on the whole engine
    measured = cost.measures_engine
    return PoolParts(cost, router, queue, autoscaler, front, new_scheduler,
                     join_after_next=engine.join_after_next and not measured,
                     multi_step=1 if measured else engine.multi_step)
