"""Waiting queues of a replica: FCFS, or by priority with optional ageing.

Both offer the few deque operations the schedulers use (``append``,
``appendleft`` for a preempted request, ``[0]``, ``popleft``, ``len``,
iteration, ``clear``). Under the priority policy a lower value is served
first and ties go to the earlier arrival; a preempted request goes back by
the same key. Ageing (a starvation guard) lowers a request's effective
priority by one per ``aging_s`` waited: since every waiting request ages at
the same rate, ordering by ``priority·aging_s + arrival_s`` is the same as
ordering by effective priority at any instant, so the heap key never changes.
"""
from __future__ import annotations

import heapq
from collections import deque

from sim.entities.request import Request


class FcfsQueue(deque):
    """First come, first served; preempted requests return to the head."""


class PriorityQueue:
    def __init__(self, aging_s: float | None = None) -> None:
        self._heap: list[tuple] = []
        self._aging_s = aging_s

    def _key(self, req: Request) -> tuple:
        if self._aging_s:
            return (req.priority * self._aging_s + req.arrival_s, req.request_id)
        return (req.priority, req.arrival_s, req.request_id)

    def append(self, req: Request) -> None:
        heapq.heappush(self._heap, (self._key(req), req))

    appendleft = append

    def __getitem__(self, index: int) -> Request:
        if index != 0:
            raise IndexError("only the head of a priority queue can be read")
        return self._heap[0][1]

    def popleft(self) -> Request:
        return heapq.heappop(self._heap)[1]

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self):
        return iter([req for _, req in sorted(self._heap, key=lambda e: e[0])])

    def clear(self) -> None:
        self._heap.clear()
