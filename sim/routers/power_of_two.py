"""Power of two choices: sample two ready replicas, take the less loaded.

Least-outstanding routing needs a global view of every replica's load; a
random pick needs none but lets queues grow unevenly. Sampling two
replicas at random and sending the request to the one with fewer
outstanding requests gets close to least-loaded balance (the maximum load
drops from log n / log log n to log log n over the mean) with O(1) work
per pick. Because the choice is random it also avoids herd behaviour: when
load information is stale or many requests arrive at once, a
deterministic least-loaded rule sends them all to the same replica, while
two random choices spread them.

Samples come from the pool's random generator, so a run is reproducible
for a given seed.
"""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

from sim.config.common import StrictModel
from sim.entities.request import Request
from sim.routers.base import HasRoom, Replica, Router


class PowerOfTwoConfig(StrictModel):
    """Sample two ready replicas at random; route to the one with fewer outstanding."""

    type: Literal["power_of_two"] = "power_of_two"


def _load(replica: Replica) -> tuple[int, int]:
    return replica.num_outstanding, replica.index


class PowerOfTwoRouter(Router):
    def __init__(self, cfg: PowerOfTwoConfig, rng: np.random.Generator | None = None) -> None:
        self._rng = rng if rng is not None else np.random.default_rng(0)

    def sample(self, ready: Sequence[Replica]) -> list[Replica]:
        """Two distinct replicas of ``ready`` drawn uniformly (one if only one)."""
        n = len(ready)
        if n == 1:
            return [ready[0]]
        u, v = self._rng.random(2).tolist()     # one draw of two: cheaper than integers()
        i = int(u * n)
        j = int(v * (n - 1))
        j += j >= i                       # distinct from i, still uniform
        return [ready[i], ready[j]]

    def pick(self, req: Request, ready: Sequence[Replica], has_room: HasRoom) -> Replica | None:
        candidates = self.sample(ready)
        if has_room is not None:
            candidates = [r for r in candidates if has_room(r)]
            if not candidates:            # both full: any replica with room, least loaded
                candidates = [r for r in ready if has_room(r)]
                if not candidates:
                    return None
        return min(candidates, key=_load)
