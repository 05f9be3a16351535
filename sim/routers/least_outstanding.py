"""Least outstanding requests: the replica with the fewest queued + running.

Ties go to the lowest replica index, so the choice is deterministic. Counts
live in a heap with lazy deletion (an entry is stale once its replica's
count has moved on), so a pick costs O(log replicas), not O(replicas).
"""
from __future__ import annotations

import heapq
from typing import Literal, Sequence

from sim.config.common import StrictModel
from sim.replica import Replica
from sim.request import Request
from sim.routers.base import Router


class LeastOutstandingConfig(StrictModel):
    type: Literal["least_outstanding"] = "least_outstanding"


class LeastOutstandingRouter(Router):
    def __init__(self, cfg: LeastOutstandingConfig) -> None:
        self._counts: list[int] = []
        self._heap: list[tuple[int, int]] = []

    def _ensure(self, num_replicas: int) -> None:
        while len(self._counts) < num_replicas:
            i = len(self._counts)
            self._counts.append(0)
            heapq.heappush(self._heap, (0, i))

    def pick(self, req: Request, replicas: Sequence[Replica]) -> Replica:
        self._ensure(len(replicas))
        heap, counts = self._heap, self._counts
        while True:
            count, i = heap[0]
            if counts[i] == count:
                break
            heapq.heappop(heap)
        counts[i] = count + 1
        heapq.heapreplace(heap, (count + 1, i))
        return replicas[i]

    def on_done(self, replica_index: int) -> None:
        counts = self._counts
        counts[replica_index] -= 1
        heapq.heappush(self._heap, (counts[replica_index], replica_index))
