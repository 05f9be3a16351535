"""Reference continuous-batching scheduler for equivalence tests.

A direct, per-request transcription of the vLLM V1 step (one list of
running requests, each allocated individually), one step at a time. The
production scheduler (sim/schedulers/continuous.py) keeps decoding requests
in aggregate and fast-forwards; both must give the same per-request times.
"""
from __future__ import annotations

import math

import numpy as np
from sim.cost.shape import BatchShape
from sim.entities.request import Request
from sim.schedulers.base import Scheduler, Segment
from sim.schedulers.waiting import PriorityQueue


class ReferenceContinuousScheduler(Scheduler):
    def __init__(self, cfg, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cfg = cfg
        self.cap = (cfg.long_prefill_token_threshold
                    if cfg.chunked_prefill and cfg.long_prefill_token_threshold
                    else cfg.max_num_batched_tokens)
        if cfg.policy == "priority":
            self.waiting = PriorityQueue(cfg.priority_aging)

    def reject_reason(self, req: Request) -> str | None:
        reason = super().reject_reason(req)
        if reason is None and not self.cfg.chunked_prefill \
                and req.total_tokens > self.cfg.max_num_batched_tokens:
            # a preempted request recomputes prompt + output in one step
            reason = "exceeds_token_budget"
        return reason

    # -- planning -------------------------------------------------------------
    def _preempt(self, victim: Request) -> None:
        self.kv.preempt(victim)
        victim.num_computed_tokens = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)

    def _victim(self) -> Request:
        return max(self.running, key=lambda r: (r.priority, r.arrival_s, r.request_id))

    def _schedule_priority(self, now_s: float) -> tuple[list[tuple[Request, int]], bool]:
        """Priority policy: decoders get their blocks together (preempting the
        largest (priority, arrival) until they fit), then prefill chunks in
        running order, each failure preempting the largest (priority, arrival),
        which may be a request already scheduled in this step."""
        kv = self.kv
        preempted = False
        while True:
            decoders = [r for r in self.running if r.is_decoding]
            need = sum(kv.blocks_needed(r, 1) for r in decoders)
            if not decoders or need <= kv.num_free_blocks:
                break
            victim = self._victim()
            self.running.remove(victim)
            self._preempt(victim)
            preempted = True
        scheduled: dict[int, tuple[Request, int]] = {}
        for r in decoders:
            assert kv.allocate(r, 1)
            scheduled[id(r)] = (r, 1)
        budget = self.cfg.max_num_batched_tokens - len(decoders)
        return self._schedule_in_order([r for r in self.running if not r.is_decoding],
                                       budget, scheduled, preempted, now_s)

    def _pop_priority_victim(self) -> Request:
        victim = self._victim()
        self.running.remove(victim)
        return victim

    def _schedule_in_order(self, order, budget, scheduled, preempted, now_s):
        """Schedule ``order`` within the budget; a failed allocation preempts the
        policy's victim (which may already be scheduled: its budget comes back);
        then admit waiting requests if nothing was preempted."""
        pop_victim = (self._pop_priority_victim if self.cfg.policy == "priority"
                      else self.running.pop)
        for req in order:
            if budget <= 0:
                break
            if req not in self.running:
                continue
            num_new = min(req.num_tokens - req.num_computed_tokens, budget)
            if not req.is_decoding:
                num_new = min(num_new, self.cap)
            stop = False
            while not self.kv.allocate(req, num_new):
                victim = pop_victim()
                if id(victim) in scheduled:
                    budget += scheduled.pop(id(victim))[1]
                self._preempt(victim)
                preempted = True
                if victim is req:
                    stop = True
                    break
            if stop:
                break
            scheduled[id(req)] = (req, num_new)
            if not req.is_decoding:     # a prefill's blocks are cached as it is scheduled
                self.kv.register_prefix(req, req.num_computed_tokens + num_new)
            budget -= num_new
        if not preempted:
            self._admit(now_s, budget, scheduled)
        rank = {id(r): k for k, r in enumerate(self.running)}
        return sorted(scheduled.values(), key=lambda e: rank[id(e[0])]), preempted

    def _admit(self, now_s: float, budget: int, scheduled: dict) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            kv = self.kv
            hit = kv.hit_blocks(req) if req.num_computed_tokens == 0 else 0
            cached = hit * kv.block_size_tokens
            num_new = req.num_tokens - max(req.num_computed_tokens, cached)
            if num_new > budget and not self.cfg.chunked_prefill:
                break
            num_new = min(num_new, budget, self.cap)
            if req.num_computed_tokens == 0:
                req.cached_prompt_tokens = 0
            if hit:
                total_blocks = -(-(cached + num_new) // kv.block_size_tokens)
                if total_blocks - hit + kv.pinned_by(req, hit) > kv.num_free_blocks:
                    break
                kv.acquire_prefix(req, hit)
                req.num_computed_tokens = cached
                # the shared prefix's tokens (not a preempted request's own cached blocks)
                req.cached_prompt_tokens = req.prefix_blocks * kv.block_size_tokens
            if not kv.allocate(req, num_new):
                break
            self.waiting.popleft()
            self.running.append(req)
            if math.isnan(req.admitted_s):
                req.admitted_s = now_s
            scheduled[id(req)] = (req, num_new)
            if not req.is_decoding:     # a prefill's blocks are cached as it is scheduled
                self.kv.register_prefix(req, req.num_computed_tokens + num_new)
            budget -= num_new

    def _schedule(self, now_s: float) -> tuple[list[tuple[Request, int]], bool]:
        if self.cfg.policy == "priority":
            return self._schedule_priority(now_s)
        # FCFS: decoding requests first, then prefill chunks, each in running
        # (admission) order; a failed allocation preempts the last running request,
        # which may be one already scheduled in this step (its budget comes back)
        order = ([r for r in self.running if r.is_decoding]
                 + [r for r in self.running if not r.is_decoding])
        return self._schedule_in_order(order, self.cfg.max_num_batched_tokens, {}, False, now_s)

    def next_segment(self, now_s: float) -> Segment | None:
        if not self.running and not self.waiting:
            return None
        scheduled, preempted = self._schedule(now_s)
        if not scheduled:
            return None
        num_tokens = prefill_work = decode_kv = 0.0
        for req, n in scheduled:
            num_tokens += n
            if req.is_decoding:
                decode_kv += req.num_computed_tokens + 1
            else:
                prefill_work += BatchShape.prefill_work(n, req.num_computed_tokens)
        shape = BatchShape(num_tokens=np.array([num_tokens]),
                           num_seqs=np.array([float(len(scheduled))]),
                           prefill_attn_work=np.array([prefill_work]),
                           decode_kv_tokens=np.array([decode_kv]))
        cost = self.cost.step(shape)
        return Segment.single_step(float(cost.time_s[0]), len(scheduled), num_tokens,
                                   float(cost.flops[0]), float(cost.bytes[0]), scheduled)

    # -- applying a finished segment ---------------------------------------------
    def finish_segment(self, seg: Segment, num_steps: int, start_s: float,
                       end_s: float) -> None:
        scheduled: list[tuple[Request, int]] = seg.payload
        finished: list[Request] = []
        for req, n in scheduled:
            assert num_steps == 1
            was_decoding = req.is_decoding
            req.num_computed_tokens += n
            if not was_decoding:        # prefix blocks are cached as a prefill computes them
                self.kv.register_prefix(req)
            if req.num_computed_tokens == req.num_tokens:
                req.num_output_tokens += 1
                if req.num_output_tokens == 1:
                    req.first_token_s = end_s
                if req.last_token_s == req.last_token_s:
                    gap = end_s - req.last_token_s
                    if not (req.max_itl_s >= gap):
                        req.max_itl_s = gap
                req.last_token_s = end_s
            if req.done:
                finished.append(req)
        if finished:
            done = set(map(id, finished))
            self.running = [r for r in self.running if id(r) not in done]
            for req in finished:
                self._complete(req, end_s)
