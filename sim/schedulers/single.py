"""One request at a time, run to completion (the baseline server).

Equivalent to static batching with a batch of one and no waiting for the
batch to fill: a prefill step, then one decode step per output token.
"""
from __future__ import annotations

from typing import ClassVar, Literal

from sim.config.common import StrictModel
from sim.schedulers.static import StaticConfig, StaticScheduler


class SingleConfig(StrictModel):
    type: Literal["single"] = "single"
    # whether the step terms a profile measured on a whole engine describe this policy's
    # steps (the engine's own continuous or single-sequence scheduling)
    engine_terms_apply: ClassVar[bool] = True


class SingleScheduler(StaticScheduler):
    def __init__(self, cfg: SingleConfig, **kwargs) -> None:
        super().__init__(StaticConfig(batch_size=1, batch_timeout=0.0), **kwargs)
