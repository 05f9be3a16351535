"""The router interface: which ready replica of a pool gets a request.

The pool tells its router when replicas become ready or leave (drained,
preempted) and when a routed request ends, so routers that track load keep
their own counts and need not scan every replica per request.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Callable, Protocol, Sequence

from sim.entities.request import Request


class Replica(Protocol):
    """What a router may read of a replica (the simulation's replicas give it; a test's
    stand-in may give no more): its index in the pool, its requests in flight, its KV
    cache's blocks in use and in all, and how much of a request's prompt its prefix
    cache holds."""

    @property
    def index(self) -> int: ...

    @property
    def num_outstanding(self) -> int: ...

    @property
    def kv_blocks_total(self) -> int: ...

    def kv_used_blocks(self) -> int: ...

    def cached_prompt_tokens(self, req: Request) -> int: ...


HasRoom = Callable[[Replica], bool] | None


class Router(ABC):
    @abstractmethod
    def pick(self, req: Request, ready: Sequence[Replica], has_room: HasRoom) -> Replica | None:
        """A replica of ``ready`` (never empty) for ``req``; with ``has_room``,
        only one for which it is true, or None when there is none."""

    def on_ready(self, replica: Replica) -> None:
        """``replica`` starts taking requests."""

    def on_leave(self, replica: Replica) -> None:
        """``replica`` takes no more requests."""

    def on_done(self, replica_index: int) -> None:
        """A request routed to ``replica_index`` ended or was lost."""

    @staticmethod
    def first_with_room(candidates, has_room: HasRoom) -> Replica | None:
        for replica in candidates:
            if has_room is None or has_room(replica):
                return replica
        return None


class BoundedLoadRouter(Router):
    """The bookkeeping of a router with bounded loads (consistent hashing with bounded
    loads, Mirrokni, Thorup and Zadimoghaddam, 2018): the requests it routed to each
    replica that are not done yet, their total over the ready replicas, and the bound a
    replica must be under to take one more."""

    def __init__(self, load_factor: float) -> None:
        self.load_factor = load_factor
        self._ready: dict[int, Replica] = {}
        self._counts: dict[int, int] = {}
        self._total = 0                   # outstanding over the ready replicas

    def on_ready(self, replica: Replica) -> None:
        i = replica.index
        self._ready[i] = replica
        self._total += self._counts.setdefault(i, 0)

    def on_leave(self, replica: Replica) -> bool:
        """Forget ``replica``'s load; whether it was ready."""
        i = replica.index
        if self._ready.pop(i, None) is None:
            return False
        self._total -= self._counts.get(i, 0)
        return True

    def on_done(self, replica_index: int) -> None:
        self._counts[replica_index] -= 1
        if replica_index in self._ready:
            self._total -= 1

    def _bound(self) -> int:
        """A replica takes one more request while its count is below this."""
        return math.ceil(self.load_factor * (self._total + 1) / len(self._ready))

    def _routed(self, replica: Replica) -> Replica:
        self._counts[replica.index] += 1
        self._total += 1
        return replica
