"""The router interface: which ready replica of a pool gets a request.

The pool tells its router when replicas become ready or leave (drained,
preempted) and when a routed request ends, so routers that track load keep
their own counts and need not scan every replica per request.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Sequence

from sim.core.replica import Replica
from sim.core.request import Request

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
