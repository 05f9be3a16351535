"""Round robin: replicas in turn, whatever their load."""
from __future__ import annotations

from typing import Literal, Sequence

from sim.config.common import StrictModel
from sim.replica import Replica
from sim.request import Request
from sim.routers.base import Router


class RoundRobinConfig(StrictModel):
    type: Literal["round_robin"] = "round_robin"


class RoundRobinRouter(Router):
    def __init__(self, cfg: RoundRobinConfig) -> None:
        self._next = 0

    def pick(self, req: Request, replicas: Sequence[Replica]) -> Replica:
        replica = replicas[self._next % len(replicas)]
        self._next += 1
        return replica
