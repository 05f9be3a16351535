"""Least outstanding requests: the replica with the fewest queued + running.

Ties go to the lowest replica index, so the choice is deterministic.
"""
from __future__ import annotations

from typing import Literal, Sequence

from sim.config.common import StrictModel
from sim.replica import Replica
from sim.request import Request
from sim.routers.base import Router


class LeastOutstandingConfig(StrictModel):
    type: Literal["least_outstanding"] = "least_outstanding"


class LeastOutstandingRouter(Router):
    def __init__(self, cfg: LeastOutstandingConfig) -> None:
        pass

    def pick(self, req: Request, replicas: Sequence[Replica]) -> Replica:
        return min(replicas, key=lambda r: (r.num_outstanding, r.index))
