"""One request at a time, run to completion (the baseline server).

Equivalent to static batching with a batch of one and no waiting for the
batch to fill: a prefill step, then one decode step per output token.
"""
from __future__ import annotations

from typing import ClassVar, Literal

from sim.schedulers.base import SchedulerConfigBase
from sim.schedulers.static import StaticConfig, StaticScheduler


class SingleConfig(SchedulerConfigBase):
    type: Literal["single"] = "single"
    engine_terms_apply: ClassVar[bool] = True


class SingleScheduler(StaticScheduler):
    def __init__(self, cfg: SingleConfig, **kwargs) -> None:
        super().__init__(StaticConfig(batch_size=1, batch_timeout=0.0), **kwargs)
