"""The continuous scheduler's scheduling policy, as a strategy it holds: in what order
waiting requests are served, whom to preempt when the KV cache runs out, and how the
decoders of a step get their blocks.

* ``fcfs`` (vLLM's default): a FIFO queue; the victim is the running request admitted
  last; decoders take their blocks one by one in admission order, and when none is left
  the victim goes, its blocks come back and taking goes on (vLLM's per-request loop,
  reproduced exactly, including the decoder that preempts itself and ends the step).
* ``priority``: a heap on (priority, arrival), with optional ageing; the victim is the
  running request with the largest (priority, arrival); victims go until every decoder
  fits, then all take their blocks at once.

A strategy works on the scheduler it is given (its cohort of decoders, the prefilling
list, the KV cache, its ``_preempt``): it is part of the continuous scheduler, split out
so that each policy reads in one place.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from sim.entities.request import Request
from sim.schedulers.waiting import PriorityQueue

if TYPE_CHECKING:
    from sim.schedulers.continuous import ContinuousScheduler


class FcfsOrder:
    __slots__ = ("s",)

    def __init__(self, sched: ContinuousScheduler) -> None:
        self.s = sched

    def admitted(self, req: Request) -> None:
        """``req`` joined the running set (FCFS: its admission order is its ``seq``)."""

    def victim(self) -> Request:
        """The running request admitted last."""
        s = self.s
        if not s.prefilling:
            return s.cohort.last()
        if not s.cohort:
            return s.prefilling[-1]
        last_decoder = s.cohort.last()
        tail = s.prefilling[-1]
        return tail if tail.seq > last_decoder.seq else last_decoder

    def make_room_for_decodes(self) -> tuple[bool, bool]:
        """Blocks for one more token of every decoder when not all are free; returns
        (preempted, stopped): ``stopped`` when a decoder preempted itself, which ends the
        step's scheduling as vLLM's running loop does. The victim (the largest admission
        order) is never a decoder that already took its block."""
        s = self.s
        cohort, kv = s.cohort, s.kv
        taken = 0
        preempted = stopped = False
        members = cohort.members
        while members:
            need = cohort.blocks_at(s.step + 1) - cohort.blocks_held
            more = min(need - taken, kv.num_free_blocks)
            if more > 0:
                kv.take(more)
                taken += more
            if taken >= need:
                break
            victim = self.victim()
            # the failing decoder is the needing one right after those that took;
            # the victim (largest admission order) is it when it is the last
            # needing decoder, i.e. it needs a block and only it is left to serve
            stopped = (victim.seq in cohort.members
                       and (victim.decode_base + s.step) % cohort.bs == 0
                       and need == taken + 1)
            s._preempt(victim)
            preempted = True
            if stopped:
                break
        cohort.blocks_held += taken
        return preempted, stopped


class PriorityOrder:
    __slots__ = ("s", "_victims")

    def __init__(self, sched: ContinuousScheduler) -> None:
        self.s = sched
        sched.waiting = PriorityQueue(sched.cfg.priority_aging)
        # running requests by largest (priority, arrival), lazily cleaned: an entry whose
        # request has left (or came back with another seq) is dropped when it surfaces
        self._victims: list[tuple[int, float, int, int, Request]] = []

    def admitted(self, req: Request) -> None:
        heapq.heappush(self._victims, (-req.priority, -req.arrival_s, -req.request_id,
                                       req.seq, req))

    def victim(self) -> Request:
        """The running request with the largest (priority, arrival)."""
        heap, s = self._victims, self.s
        while True:
            _, _, _, seq, req = heap[0]
            if req.seq == seq and s._running(req):
                return req
            heapq.heappop(heap)

    def make_room_for_decodes(self) -> tuple[bool, bool]:
        """Preempt the largest (priority, arrival) until every decoder's block is free,
        then take them all; never stops the step."""
        s = self.s
        cohort, kv = s.cohort, s.kv
        preempted = False
        while cohort.members and cohort.blocks_at(s.step + 1) - cohort.blocks_held \
                > kv.num_free_blocks:
            s._preempt(self.victim())
            preempted = True
        need = cohort.blocks_at(s.step + 1) - cohort.blocks_held if cohort.members else 0
        kv.take(need)
        cohort.blocks_held += need
        return preempted, False


ORDERS = {"fcfs": FcfsOrder, "priority": PriorityOrder}
