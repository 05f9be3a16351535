"""Least outstanding requests: the ready replica with the fewest queued + running.

Ties go to the lowest replica index, so the choice is deterministic. Counts
live in a heap with lazy deletion (an entry is stale once its replica's
count has moved on or the replica has left), so a pick costs
O(log replicas), not O(replicas).
"""
from __future__ import annotations

import heapq
from typing import Literal, Sequence

import numpy as np

from sim.config.common import StrictModel
from sim.entities.request import Request
from sim.routers.base import HasRoom, Replica, Router


class LeastOutstandingConfig(StrictModel):
    type: Literal["least_outstanding"] = "least_outstanding"


class LeastOutstandingRouter(Router):
    def __init__(self, cfg: LeastOutstandingConfig,
                 rng: np.random.Generator | None = None) -> None:
        self._counts: dict[int, int] = {}
        self._ready: dict[int, Replica] = {}
        self._heap: list[tuple[int, int]] = []

    def on_ready(self, replica: Replica) -> None:
        i = replica.index
        self._ready[i] = replica
        count = self._counts.setdefault(i, 0)
        heapq.heappush(self._heap, (count, i))

    def on_leave(self, replica: Replica) -> None:
        self._ready.pop(replica.index, None)

    def on_done(self, replica_index: int) -> None:
        counts = self._counts
        counts[replica_index] -= 1
        if replica_index in self._ready:
            heapq.heappush(self._heap, (counts[replica_index], replica_index))

    def pick(self, req: Request, ready: Sequence[Replica], has_room: HasRoom) -> Replica | None:
        heap, counts, live = self._heap, self._counts, self._ready
        while heap:
            count, i = heap[0]
            if i in live and counts[i] == count:
                break
            heapq.heappop(heap)
        else:
            return None
        replica = live[i]
        if has_room is not None and not has_room(replica):
            return None                 # the least loaded has no room: none has
        counts[i] = count + 1
        heapq.heapreplace(heap, (count + 1, i))
        return replica
