"""What a replica's scheduler looks like from the replica's side.

The replica asks ``next_segment(now)`` and gets one of:
- a ``Segment``: one or more engine iterations to run back to back. The
  replica waits ``step_end_s[-1]`` and then calls ``finish_segment``. An
  interruptible segment (fast-forwarded identical decode steps) may be cut
  short at the first step boundary after a new request arrives, exactly as
  the step-by-step loop would have admitted it there;
- a float: nothing to run before that simulated time (a static batch waiting
  to fill) unless a request arrives first;
- ``None``: idle until a request arrives.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from sim.cost.base import CostModel
from sim.kv import KvCacheManager
from sim.request import Request


@dataclass
class Segment:
    step_end_s: np.ndarray          # cumulative end offset of each step from segment start
    num_tokens: np.ndarray          # new tokens computed in each step
    flops: np.ndarray               # work of each step (whole replica)
    bytes: np.ndarray
    num_seqs: int                   # sequences in the batch (for step records)
    interruptible: bool = False
    payload: Any = field(default=None, repr=False)  # scheduler-private plan

    @property
    def num_steps(self) -> int:
        return len(self.step_end_s)

    def steps_done_by(self, elapsed_s: float) -> int:
        """Steps completed once the step running at ``elapsed_s`` has ended."""
        return min(int(np.searchsorted(self.step_end_s, elapsed_s, side="left")) + 1,
                   self.num_steps)


@dataclass
class ReplicaLimits:
    """Limits a request is checked against before it may wait for this replica."""

    max_model_len: int


class Scheduler(ABC):
    """Base: a FCFS waiting queue, a KV cache and the cost model of the replica."""

    def __init__(self, kv: KvCacheManager, cost: CostModel, limits: ReplicaLimits,
                 on_finish: Callable[[Request], None]) -> None:
        self.kv = kv
        self.cost = cost
        self.limits = limits
        self.on_finish = on_finish
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # -- admission -------------------------------------------------------------
    def reject_reason(self, req: Request) -> str | None:
        """Why ``req`` can never be served here, or None."""
        if req.total_tokens > self.limits.max_model_len:
            return "exceeds_max_model_len"
        if not self.kv.fits_ever(req.total_tokens):
            return "exceeds_kv_capacity"
        return None

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    # -- the step loop ----------------------------------------------------------
    @abstractmethod
    def next_segment(self, now_s: float) -> Segment | float | None: ...

    @abstractmethod
    def finish_segment(self, seg: Segment, num_steps: int, start_s: float) -> None: ...

    def _complete(self, req: Request, finish_s: float) -> None:
        self.kv.free(req)
        req.finish_s = finish_s
        self.on_finish(req)
