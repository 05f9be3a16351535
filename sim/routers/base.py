from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

from sim.replica import Replica
from sim.request import Request


class Router(ABC):
    @abstractmethod
    def pick(self, req: Request, replicas: Sequence[Replica]) -> Replica:
        """Choose one of ``replicas`` (never empty) for ``req``."""

    def on_done(self, replica_index: int) -> None:
        """A request routed to ``replica_index`` reached a terminal status."""
