"""Round robin: ready replicas in turn, whatever their load."""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

from sim.config.common import StrictModel
from sim.entities.request import Request
from sim.routers.base import HasRoom, Replica, Router


class RoundRobinConfig(StrictModel):
    type: Literal["round_robin"] = "round_robin"


class RoundRobinRouter(Router):
    def __init__(self, cfg: RoundRobinConfig, rng: np.random.Generator | None = None) -> None:
        self._next = 0

    def pick(self, req: Request, ready: Sequence[Replica], has_room: HasRoom) -> Replica | None:
        n = len(ready)
        start = self._next % n
        if has_room is None:
            self._next = start + 1
            return ready[start]
        order = (ready[(start + k) % n] for k in range(n))
        replica = self.first_with_room(order, has_room)
        if replica is not None:
            self._next = (ready.index(replica) + 1) if has_room is not None else start + 1
        return replica
